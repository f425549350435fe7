"""Scaled dot-product attention (section 3.2.1, eq. (1)) and multi-head attention (section 3.2.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.hardware import attention_kernel
from transformer_min.core.errors import ModelInputError
from transformer_min.core.schema import divisors


def _align_mask(mask: Tensor, q: Tensor) -> Tensor:
    """Accept (Lq, Lk), (B, Lq, Lk), (B, 1, Lq, Lk), (B, H, Lq, Lk) and (B, 1, 1, Lk) masks.

    A 3-D mask next to 4-D queries is (B, Lq, Lk): give it a head axis so it broadcasts.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = may attend), got {mask.dtype}")
    if mask.dim() == 3 and q.dim() == 4:
        mask = mask.unsqueeze(1)  # (B, 1, Lq, Lk)
    return mask


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, section 3.2.1, eq. (1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, softmax over the key axis.

    Shapes: q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v), typically (B, H, L, d).
    mask: boolean, True = may attend, broadcastable to (B, H, Lq, Lk); accepted forms are
    (Lq, Lk), (B, Lq, Lk), (B, 1, Lq, Lk), (B, H, Lq, Lk) and the padding mask (B, 1, 1, Lk).
    Returns output (..., Lq, d_v) and weights (..., Lq, Lk).

    Section 3.2.3: masked positions get weight exactly 0. A row whose keys are all masked
    returns weights of 0 and an output of 0 (finite in every dtype; the same as
    torch.nn.functional.scaled_dot_product_attention), instead of the NaN of a -inf fill.
    The fill value is finfo(dtype).min, not -1e9, which would overflow float16.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, Lq, Lk)
    if mask is not None:
        mask = _align_mask(mask, q)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # softmax in at least fp32 (half inputs are upcast; float64 stays float64)
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # exactly 0; fully masked rows become all 0
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return attn @ v, weights  # (B, H, Lq, d_v), (B, H, Lq, Lk)


def use_fused_kernel(q: Tensor) -> bool:
    """Whether F.scaled_dot_product_attention is the faster path for queries like `q`.

    Decided per machine, not by a constant: `hardware.attention_kernel` keeps the fused kernel on
    CUDA and in fp32, and for bf16/fp16 on the CPU measures both forms of eq. (1) once and caches
    the faster (on one AMX CPU the fused kernel was 7.7x slower at B=200, H=4, L=18).
    """
    return _kernel(q.device.type, q.dtype) == "fused"


@torch._dynamo.assume_constant_result  # under torch.compile: decided once at trace time, not traced into
def _kernel(device_type: str, dtype: torch.dtype) -> str:
    return attention_kernel(device_type, dtype)


@dataclass
class KVCache:
    """Keys and values kept between decoding steps: (B, H, S, d_k) and (B, H, S, d_v).

    Self-attention appends each step's positions; encoder-decoder attention fills it once. The
    buffers grow by doubling, so a step writes in place instead of concatenating the whole past.
    """

    k_buf: Tensor | None = None
    v_buf: Tensor | None = None
    length: int = -1  # -1: all of k_buf is filled

    def __post_init__(self) -> None:
        if self.length < 0:
            self.length = 0 if self.k_buf is None else self.k_buf.size(2)

    @property
    def k(self) -> Tensor | None:
        return None if self.k_buf is None else self.k_buf[:, :, : self.length]  # (B, H, S, d_k)

    @property
    def v(self) -> Tensor | None:
        return None if self.v_buf is None else self.v_buf[:, :, : self.length]  # (B, H, S, d_v)

    def set(self, k: Tensor, v: Tensor) -> None:
        """Store k, v as the whole cache (encoder-decoder attention)."""
        self.k_buf, self.v_buf, self.length = k, v, k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's k, v (B, H, T, d) and return all positions so far."""
        if self.k_buf is None:
            self.set(k, v)
            return k, v
        need = self.length + k.size(2)
        if need > self.k_buf.size(2):  # grow: double the capacity
            cap = max(need, 2 * self.k_buf.size(2))
            self.k_buf = _grow(self.k_buf, cap, self.length)
            self.v_buf = _grow(self.v_buf, cap, self.length)
        self.k_buf[:, :, self.length:need] = k
        self.v_buf[:, :, self.length:need] = v
        self.length = need
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses)."""
        if self.k_buf is not None:
            self.k_buf = self.k_buf.index_select(0, index)
            self.v_buf = self.v_buf.index_select(0, index)


def _grow(buf: Tensor, capacity: int, length: int) -> Tensor:
    out = buf.new_empty(buf.size(0), buf.size(1), capacity, buf.size(3))
    out[:, :, :length] = buf[:, :, :length]
    return out


class MultiHeadAttention(nn.Module):
    """Multi-head attention, section 3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    with W_i^Q, W_i^K in R^{d_model x d_k}, W_i^V in R^{d_model x d_v}, W^O in R^{h d_v x d_model}.
    The h per-head projections are stored as one d_model x (h d_k) matrix each (w_q, w_k, w_v).

    Two paths compute the same function: the paper path (eq. (1) written out, returns the per-head
    weights (B, H, Lq, Lk) when `need_weights=True`) and the fast path through
    torch.nn.functional.scaled_dot_product_attention (fused kernels; used otherwise, except where
    `use_fused_kernel` says the written-out matmuls are faster).

    Deviation: `dropout` here is attention-probability dropout, which is not in the paper
    (section 5.4 has residual and embedding dropout only); the default 0 keeps the paper.
    """

    def __init__(self, d_model: int, num_heads: int, d_k: int | None = None, d_v: int | None = None,
                 dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads <= 0 or d_model <= 0:
            raise ModelInputError(f"d_model and num_heads must be positive, got {d_model} and {num_heads}")
        if (d_k is None or d_v is None) and d_model % num_heads != 0:
            # 3.2.2: d_k = d_v = d_model / h. Without explicit sizes the heads must split d_model
            # evenly (as torch.nn.MultiheadAttention requires); explicit d_k, d_v (Table 3 rows A, B) need not.
            raise ModelInputError(
                f"num_heads {num_heads} does not divide d_model {d_model} (d_k = d_v = d_model / h, section "
                f"3.2.2); choose num_heads from {divisors(d_model)}, or pass d_k and d_v explicitly"
            )
        self.num_heads = num_heads
        self.d_k = d_k if d_k is not None else d_model // num_heads
        self.d_v = d_v if d_v is not None else d_model // num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, num_heads * self.d_v, bias=bias)
        self.w_o = nn.Linear(num_heads * self.d_v, d_model, bias=bias)

    def _split_heads(self, x: Tensor, d_head: int) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, d_head).transpose(1, 2)  # (B, H, L, d_head)

    def _project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of self-attention in one matmul with [W^Q; W^K; W^V] (the same arithmetic as
        three projections, fewer passes over x): (B, H, L, d_k), (B, H, L, d_k), (B, H, L, d_v)."""
        w, b = self._fused_qkv()  # (H(2 d_k + d_v), D), (H(2 d_k + d_v),)
        hk, hv = self.num_heads * self.d_k, self.num_heads * self.d_v
        q, k, v = F.linear(x, w, b).split([hk, hk, hv], dim=-1)  # each (B, L, H d)
        return self._split_heads(q, self.d_k), self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)

    def train(self, mode: bool = True) -> "MultiHeadAttention":
        # A fused optimizer step (Adam(fused=True)) changes weights without bumping their version
        # counter, so the kept [W^Q; W^K; W^V] is dropped at every train/eval switch.
        self._qkv_key = None
        return super().train(mode)

    def _fused_qkv(self) -> tuple[Tensor, Tensor | None]:
        """[W^Q; W^K; W^V] and its bias. Without autograd (inference) the concatenation is kept and
        rebuilt when a weight changes (tensor version or storage) or the module switches between
        train and eval, so decoding does not pay it every step."""
        params = [self.w_q.weight, self.w_k.weight, self.w_v.weight]
        biases = None if self.w_q.bias is None else [self.w_q.bias, self.w_k.bias, self.w_v.bias]
        everything = params + (biases or [])
        if torch.is_grad_enabled() and any(p.requires_grad for p in everything):
            return torch.cat(params), None if biases is None else torch.cat(biases)
        key = tuple((p.data_ptr(), p._version, p.dtype) for p in everything)
        if getattr(self, "_qkv_key", None) != key:
            with torch.no_grad():
                self._qkv = (torch.cat(params), None if biases is None else torch.cat(biases))
            self._qkv_key = key
        return self._qkv

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """K W^K and V W^V split into heads: (B, H, S, d_k), (B, H, S, d_v)."""
        return self._split_heads(self.w_k(key), self.d_k), self._split_heads(self.w_v(value), self.d_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False, cache: KVCache | None = None,
                static_kv: bool = False) -> tuple[Tensor, Tensor | None]:
        """query (B, T, D), key/value (B, S, D), mask -> (B, T, D), weights (B, H, T, S) or None.

        cache: with static_kv=True (encoder-decoder attention) K and V are projected once and
        reused; otherwise (decoder self-attention) this step's K and V are appended to it.
        """
        B, T, _ = query.shape
        if query is key and key is value and not static_kv:
            q, k, v = self._project_self(query)  # self-attention: one matmul for Q, K, V
        else:
            q = self._split_heads(self.w_q(query), self.d_k)  # (B, H, T, d_k)
            if static_kv and cache is not None and cache.k is not None:
                k, v = cache.k, cache.v  # encoder-decoder K, V: projected once, reused
            else:
                k, v = self.project_kv(key, value)  # (B, H, S, d_k), (B, H, S, d_v)
        if cache is not None:
            if not static_kv:
                k, v = cache.append(k, v)  # (B, H, S_prev + T, d_k)
            elif cache.k is None:
                cache.set(k, v)
        p = self.dropout if self.training else 0.0
        if need_weights or not use_fused_kernel(q):
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
            weights = weights if need_weights else None
        else:
            attn_mask = _align_mask(mask, q) if mask is not None else None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
            weights = None
        out = out.transpose(1, 2).reshape(B, T, self.num_heads * self.d_v)  # (B, T, H*d_v) = Concat
        return self.w_o(out), weights  # (B, T, D)
