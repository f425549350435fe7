"""Scaled dot-product attention (section 3.2.1, eq. (1)) and multi-head attention (section 3.2.2).

`MultiHeadAttention` is also the base of the position-aware self-attentions (model.positional =
"rope" or "relative", model/rotary.py and model/relative.py): a subclass changes `encode_positions`
(Q and K after projection) or `attend` (eq. (1) itself), nothing else.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.config_schema import ModelConfig, head_dim
from transformer_min.core.errors import ModelInputError
from transformer_min.core.schema import divisors
from transformer_min.core.speed import MANY_FROM, few_query_kernel
from transformer_min.model.inference import AttentionWeights, Packed
from transformer_min.model.kv_cache import KVCache
from transformer_min.model.step_kv import LayerKV
from transformer_min.core.i18n import tr

KERNELS = ("fused", "matmul")


def align_mask(mask: Tensor, q: Tensor) -> Tensor:
    """Accept (Lq, Lk), (B, Lq, Lk), (B, 1, Lq, Lk), (B, H, Lq, Lk) and (B, 1, 1, Lk) masks.

    A 3-D mask next to 4-D queries is (B, Lq, Lk): give it a head axis so it broadcasts.
    """
    if mask.dtype != torch.bool:
        raise TypeError(tr("mask must be boolean (True = may attend), got {dtype}").format(dtype=mask.dtype))
    if mask.dim() == 3 and q.dim() == 4:
        mask = mask.unsqueeze(1)  # (B, 1, Lq, Lk)
    return mask


def masked_softmax(scores: Tensor, mask: Tensor | None, dtype: torch.dtype) -> Tensor:
    """softmax over the key axis of (already scaled) scores (..., Lq, Lk), section 3.2.3 masking.

    Masked positions get weight exactly 0. A row whose keys are all masked returns weights of 0
    (finite in every dtype; the same as torch.nn.functional.scaled_dot_product_attention), instead
    of the NaN of a -inf fill. The fill value is finfo(dtype).min, not -1e9, which would overflow
    float16. The softmax runs in at least fp32 and the weights come back in `dtype`.
    """
    if mask is not None:
        mask = align_mask(mask, scores)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(dtype)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # exactly 0; fully masked rows become all 0
    return weights


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, section 3.2.1, eq. (1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, softmax over the key axis.

    Shapes: q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v), typically (B, H, L, d).
    mask: boolean, True = may attend, broadcastable to (B, H, Lq, Lk); accepted forms are
    (Lq, Lk), (B, Lq, Lk), (B, 1, Lq, Lk), (B, H, Lq, Lk) and the padding mask (B, 1, 1, Lk).
    Returns output (..., Lq, d_v) and weights (..., Lq, Lk); masking as in `masked_softmax`.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, Lq, Lk)
    weights = masked_softmax(scores, mask, q.dtype)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return attn @ v, weights  # (B, H, Lq, d_v), (B, H, Lq, Lk)


def few_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Eq. (1) for the few queries of a decoding step, at inference: q (B, H, g, d_k), k (B, H, S, d_k),
    v (B, H, S, d_v), mask (B, 1, 1, S) boolean (True = may attend) or additive (0, or a large negative) ->
    (B, H, g, d_v). Two batched products and a softmax: torch's fused kernel is built for blocks of many
    queries, and with one query per row it read K and V at half the speed of these (issue 37). A masked
    position gets weight 0, as in `masked_softmax` (a row with every key masked: the mask's rows always hold
    the source's EOS)."""
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))  # (B, H, g, S)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores.add_(mask)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def step_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Eq. (1) for a decoding step (shapes and mask as `few_query_attention`): torch's fused kernel where the step
    has few query rows (one sentence's beams: fewer than core.speed.MANY_FROM) and it measured faster than the two
    batched products for these head sizes on this machine (core.speed.few_query_kernel), else
    `few_query_attention`. The two round differently (about 1e-7), not in what they compute."""
    if q.size(0) * q.size(2) < MANY_FROM and \
            few_query_kernel(q.size(1), q.size(-1), v.size(-1), few_query_attention) == "fused":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return few_query_attention(q, k, v, mask)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, section 3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    with W_i^Q, W_i^K in R^{d_model x d_k}, W_i^V in R^{d_model x d_v}, W^O in R^{h d_v x d_model}.
    The h per-head projections are stored as one d_model x (h d_k) matrix each (w_q, w_k, w_v).

    Two paths compute the same function: the paper path (eq. (1) written out, returns the per-head
    weights (B, H, Lq, Lk) when `need_weights=True`) and torch.nn.functional.scaled_dot_product_attention
    (fused kernels). `kernel` ("fused" or "matmul") picks the path for need_weights=False; it is fixed
    when the module is built (`build_model` asks core.hardware.attention_kernel for the device and
    precision of the run) and may be set again afterwards (`mha.kernel = "matmul"`).

    Deviation: `dropout` here is attention-probability dropout, which is not in the paper
    (section 5.4 has residual and embedding dropout only); the default 0 keeps the paper.
    """

    # ModelConfig fields a subclass takes as extra keyword arguments (build_model passes them).
    config_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, d_model: int, num_heads: int, d_k: int | None = None, d_v: int | None = None,
                 dropout: float = 0.0, bias: bool = True, kernel: str = "fused"):
        super().__init__()
        if num_heads <= 0 or d_model <= 0:
            raise ModelInputError(tr("d_model and num_heads must be positive, got {d_model} and {num_heads}").format(d_model=d_model, num_heads=num_heads))
        if (d_k is None or d_v is None) and d_model % num_heads != 0:
            # 3.2.2: d_k = d_v = d_model / h. Without explicit sizes the heads must split d_model
            # evenly (as torch.nn.MultiheadAttention requires); explicit d_k, d_v (Table 3 rows A, B) need not.
            raise ModelInputError(
                tr("num_heads {num_heads} does not divide d_model {d_model} (d_k = d_v = d_model / h, section 3.2.2); choose num_heads from {divisors}, or pass d_k and d_v explicitly").format(num_heads=num_heads, d_model=d_model, divisors=divisors(d_model))
            )
        if kernel not in KERNELS:
            raise ModelInputError(tr("kernel must be one of {KERNELS}, got {kernel!r}").format(KERNELS=KERNELS, kernel=kernel))
        self.num_heads = num_heads
        self.d_k = head_dim(d_model, num_heads, d_k)  # 3.2.2: d_k = d_v = d_model / h unless given
        self.d_v = head_dim(d_model, num_heads, d_v)
        self.dropout = dropout
        self.kernel = kernel
        self.w_q = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, num_heads * self.d_v, bias=bias)
        self.w_o = nn.Linear(num_heads * self.d_v, d_model, bias=bias)

    @classmethod
    def count_values(cls, m: ModelConfig) -> int:
        """Parameters of one such module under `m`, in closed form (section 3.2.2): W^Q, W^K
        (d_model x h d_k), W^V (d_model x h d_v), W^O (h d_v x d_model) and their biases."""
        d, h, dk, dv = m.d_model, m.num_heads, m.head_dim_k, m.head_dim_v
        return d * h * (2 * dk + dv) + h * dv * d + (h * (2 * dk + dv) + d if m.bias else 0)

    def split_heads(self, x: Tensor, d_head: int) -> Tensor:
        """(B, L, H d_head) -> (B, H, L, d_head)."""
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, d_head).transpose(1, 2)  # (B, H, L, d_head)

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """K W^K and V W^V split into heads: (B, H, S, d_k), (B, H, S, d_v)."""
        return self.split_heads(self.w_k(key), self.d_k), self.split_heads(self.w_v(value), self.d_v)

    def encode_positions(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """Q (B, H, T, d_k) at positions offset.., this call's K (B, H, T, d_k) at the same positions
        -> Q, K. The paper's attention sees no positions (they are added to the embeddings, 3.5)."""
        return q, k

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool,
               offset: int) -> tuple[Tensor, Tensor | None]:
        """Eq. (1) on heads: q (B, H, T, d_k) at positions offset.., k, v (B, H, S, d) at positions
        0.. -> (B, H, T, d_v), weights (B, H, T, S) or None."""
        p = self.dropout if self.training else 0.0
        if need_weights or self.kernel == "matmul":
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
            return out, weights if need_weights else None
        attn_mask = align_mask(mask, q) if mask is not None else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p), None

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False, cache: KVCache | None = None,
                static_kv: bool = False) -> tuple[Tensor, Tensor | None]:
        """query (B, T, D), key/value (B, S, D), mask -> (B, T, D), weights (B, H, T, S) or None.

        cache: with static_kv=True (encoder-decoder attention) K and V are projected once and
        reused; otherwise (decoder self-attention) this step's K and V are appended to it, and the
        queries sit at positions cache.length .. cache.length + T - 1.
        """
        B, T, _ = query.shape
        offset = 0 if cache is None or static_kv else cache.length
        q = self.split_heads(self.w_q(query), self.d_k)  # (B, H, T, d_k)
        if static_kv and cache is not None and cache.k is not None:
            k, v = cache.k, cache.v  # encoder-decoder K, V: projected once, reused
        else:
            k, v = self.project_kv(key, value)  # (B, H, S, d_k), (B, H, S, d_v)
            q, k = self.encode_positions(q, k, offset)
        if cache is not None:
            if not static_kv:
                k, v = cache.append(k, v)  # (B, H, S_prev + T, d_k)
            elif cache.k is None:
                cache.set(k, v)
        out, weights = self.attend(q, k, v, mask, need_weights, offset)
        out = out.transpose(1, 2).reshape(B, T, self.num_heads * self.d_v)  # (B, T, H*d_v) = Concat
        return self.w_o(out), weights  # (B, T, D)

    # ---------------------------------------------------------------- the one-token inference step
    def step_weights(self, transposed: bool, fuse_kv: bool) -> AttentionWeights:
        """A copy of W^Q (with W^K, W^V fused after it when `fuse_kv`: self-attention) and W^O for `self_step`
        and `cross_step`, in the layout `transposed` (model/inference.py)."""
        lins = (self.w_q, self.w_k, self.w_v) if fuse_kv else (self.w_q,)
        return AttentionWeights(Packed(transposed, *lins), Packed(transposed, self.w_o))

    @property
    def paper_attention(self) -> bool:
        """Whether eq. (1) here is the paper's (a subclass may change Q and K before it, as rope does, but not eq. (1)
        itself, as relative positions do): a beam cache may then take it (model/beam_kv.py)."""
        return type(self).attend is MultiHeadAttention.attend and \
            type(self).attend_step is MultiHeadAttention.attend_step

    def attend_step(self, q: Tensor, k: Tensor, v: Tensor, offset: int) -> Tensor:
        """Eq. (1) for one new query per row: q (N, H, 1, d_k) at position `offset`, k, v (N, H, offset + 1, d)
        -> (N, H, 1, d_v). No mask (the cache holds positions 0..offset only), no dropout, no weights;
        `step_attention` unless a subclass has its own `attend` (relative positions), which is called."""
        if type(self).attend is MultiHeadAttention.attend:
            return step_attention(q, k, v)
        return self.attend(q, k, v, None, False, offset)[0]

    def self_step(self, x: Tensor, t: int, cache: KVCache, w: AttentionWeights, residual: Tensor) -> Tensor:
        """residual + masked self-attention (3.2.3) of the newest position only: x, residual (N, D), x at position t
        -> (N, D) (the sum taken by W^O's product, `Packed.add`: int8's in place on its new output).

        Q, K, V from one fused GEMM; this position's K, V appended to `cache` (positions 0..t-1 before);
        `encode_positions` rotates Q and K as `forward` does (rope)."""
        N, H = x.size(0), self.num_heads
        if self.d_k == self.d_v:  # K and V appended as one (N, 2, H, 1, d) block (model/step_kv.py)
            qkv = w.q(x).view(N, 3, H, 1, self.d_k)  # (N, 3, H, 1, d)
            if type(self).encode_positions is MultiHeadAttention.encode_positions:  # no positions in Q, K (3.5)
                q, kv = qkv[:, 0], qkv[:, 1:]
            else:
                q, k = self.encode_positions(qkv[:, 0], qkv[:, 1], t)
                kv = torch.stack((k, qkv[:, 2]), 1)
            # a beam cache (model/beam_kv.py: made only where `paper_attention`) takes eq. (1) itself once its values
            # are in beam slots
            out = cache.attend(q, kv, t) if isinstance(cache, LayerKV) else None
            if out is not None:
                return w.out.add(out.reshape(N, H * self.d_v), residual)
            k_all, v_all = cache.append_kv(kv, t)  # (N, H, t + 1, d)
        else:
            q, k, v = w.q(x).split([H * self.d_k, H * self.d_k, H * self.d_v], dim=-1)  # (N, H d_k), .., (N, H d_v)
            q, k = self.encode_positions(*(y.reshape(N, H, 1, -1) for y in (q, k)), t)  # (N, H, 1, d_k)
            k_all, v_all = cache.append(k, v.reshape(N, H, 1, -1))  # (N, H, t + 1, d)
        out = self.attend_step(q, k_all, v_all, t)  # (N, H, 1, d_v)
        return w.out.add(out.reshape(N, H * self.d_v), residual)  # residual + Concat(heads) W^O: (N, D)

    def cross_step(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, w: AttentionWeights,
                   residual: Tensor) -> Tensor:
        """residual + encoder-decoder attention (3.2.3) of the newest position: x, residual (N, D), the encoder's
        keys and values projected once (`project_kv`: (B, H, S, d_k), (B, H, S, d_v)) for B sentences whose N = g B
        rows are g consecutive rows each (a sentence's beams: g = 1 when each row has its own copy), mask
        (B, 1, 1, S) (boolean, True = may attend, or added to the scores: 0 or a large negative) -> (N, D). The g
        rows of a sentence are g queries against its one copy of K and V (issue 37: K and V read once, not g
        times); W^O's product adds the residual (`Packed.add`)."""
        N, H, B = x.size(0), self.num_heads, k.size(0)
        g = N // B
        q = w.q(x).view(B, g, H, self.d_k).transpose(1, 2)  # (B, H, g, d_k)
        out = step_attention(q, k, v, mask)  # (B, H, g, d_v)
        return w.out.add(out.transpose(1, 2).reshape(N, H * self.d_v), residual)  # (N, D)
