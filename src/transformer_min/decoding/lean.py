"""The decoder step for inference, without what only training needs (section 6.1's searches, issue 18).

`LeanStepper` computes what `TransformerStepper(use_cache=True)` computes, one new token per row and step,
with less work around the arithmetic:
- W^Q, W^K, W^V of each self-attention as one matrix (one GEMM instead of three), every weight stored in
  the layout measured faster on this machine (core.hardware.decode_weight_layout: W^T for torch.addmm or W
  for F.linear; with a few rows the GEMM library may repack one of them every call);
- the encoder-decoder keys and values of every layer projected once, before the first step;
- no dropout modules, no token-range checks, no trace hooks (the model is in eval mode);
- eq. (1) through torch's fused scaled_dot_product_attention (fp32 inference), unless the attention class
  has its own `attend` (relative positions) or rotates Q and K (`encode_positions`, rope): those are called;
- rows can be dropped (`reorder` with fewer rows): the searches drop sentences that are finished, so no
  GEMM is spent on them.
Tests hold it to the module path: the same log-probabilities and the same hypotheses.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_min.core.speed import decode_weight_layout
from transformer_min.model.attention import MultiHeadAttention
from transformer_min.model.kv_cache import KVCache
from transformer_min.model.masks import padding_mask


def _t(transposed: bool, linear: torch.nn.Linear, *more: torch.nn.Linear) -> tuple[Tensor, Tensor | None]:
    """The weight, several fused along the output axis, and the bias; stored as W^T (in, out) contiguous for
    torch.addmm when `transposed`, else as W (out, in) for F.linear (core.hardware.decode_weight_layout: the
    layout measured faster on this machine)."""
    lins = (linear, *more)
    w = torch.cat([lin.weight for lin in lins])  # (out, in)
    b = None if lins[0].bias is None else torch.cat([lin.bias for lin in lins])
    return (w.t().contiguous() if transposed else w), b


def _addmm(x: Tensor, wb: tuple[Tensor, Tensor | None]) -> Tensor:
    """x (N, in) -> x W^T + b (N, out), W^T stored (in, out)."""
    w, b = wb
    return x @ w if b is None else torch.addmm(b, x, w)


def _linear(x: Tensor, wb: tuple[Tensor, Tensor | None]) -> Tensor:
    """x (N, in) -> x W^T + b (N, out), W stored (out, in)."""
    return F.linear(x, *wb)


@dataclass(frozen=True)
class _Weights:
    """One decoder layer's weights as the step uses them (transposed, Q/K/V fused)."""

    qkv: tuple  # W^Q, W^K, W^V of self-attention fused: (D, H (2 d_k + d_v)), bias
    self_out: tuple  # W^O (H d_v, D), bias
    cross_q: tuple
    cross_out: tuple
    ffn_1: tuple  # (D, d_ff), bias: eq. (2)
    ffn_2: tuple  # (d_ff, D), bias


_PREPARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (key, weights, generator)


def prepared_weights(model, transposed: bool = True) -> tuple[list[_Weights], tuple]:
    """The step's weights of `model` in the layout `transposed` (see `_t`), made once and kept while no parameter
    changes (a new batch of sentences reuses them; training, loading or averaging weights in place bumps a
    version and they are made again)."""
    versions = (transposed, id(model.generator), *((p.data_ptr(), p._version) for p in model.parameters()))
    kept = _PREPARED.get(model)
    if kept is not None and kept[0] == versions:
        return kept[1], kept[2]
    with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: usable under inference mode and outside
        layers = []
        for layer in model.decoder.layers:
            sa, ca, ffn = layer.self_attn, layer.cross_attn, layer.feed_forward
            layers.append(_Weights(*(_t(transposed, *lins) for lins in ((sa.w_q, sa.w_k, sa.w_v), (sa.w_o,),
                                                                        (ca.w_q,), (ca.w_o,), (ffn.w_1,), (ffn.w_2,)))))
        # a generator that is not one nn.Linear (a wrapped one, as in a verify check) is called as it is
        generator = _t(transposed, model.generator) if isinstance(model.generator, torch.nn.Linear) else None
    _PREPARED[model] = (versions, layers, generator)
    return layers, generator


@dataclass
class _Layer:
    """One decoder layer in a search: the module, its step weights, cached keys and values."""

    layer: torch.nn.Module
    w: _Weights
    cross_k: Tensor  # (N, H, S, d_k): encoder-decoder keys, projected once
    cross_v: Tensor  # (N, H, S, d_v)
    cache: KVCache
    plain: bool  # the paper's attention: fused SDPA; else the class's encode_positions/attend


def _plain(attn: MultiHeadAttention) -> bool:
    kind = type(attn)
    return kind.attend is MultiHeadAttention.attend and kind.encode_positions is MultiHeadAttention.encode_positions


def _norm(x: Tensor, norm: torch.nn.LayerNorm) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


class LeanStepper:
    """Runs a `Transformer` (eval mode) one token per row and step, for greedy and beam search."""

    def __init__(self, model, src: Tensor, pad_id: int, repeat: int = 1):
        if model.training:
            raise ValueError("LeanStepper is for inference: call model.eval() first")
        self.model = model
        src_mask = padding_mask(src, pad_id)  # (B, 1, 1, S)
        with torch.no_grad():
            memory, _ = model.encode(src, src_mask)  # (B, S, D)
            if repeat > 1:  # beams of one sentence share its encoding
                memory = memory.repeat_interleave(repeat, 0)
                src_mask = src_mask.repeat_interleave(repeat, 0)
            transposed = decode_weight_layout() == "transposed"
            self._affine = _addmm if transposed else _linear
            weights, self.generator = prepared_weights(model, transposed)
            self.layers = []
            for layer, w in zip(model.decoder.layers, weights):
                k, v = layer.cross_attn.project_kv(memory, memory)  # (N, H, S, d_k), (N, H, S, d_v)
                self.layers.append(_Layer(layer, w, k, v, KVCache(), _plain(layer.self_attn)))
        self.src_mask = src_mask  # (N, 1, 1, S)
        self.scale = math.sqrt(model.d_model)

    def _self_attention(self, lay: _Layer, x: Tensor, t: int) -> Tensor:
        """x (N, D) at position t -> masked self-attention output (N, D) (no mask: the cache holds 0..t)."""
        sa = lay.layer.self_attn
        N, H = x.size(0), sa.num_heads
        q, k, v = self._affine(x, lay.w.qkv).split([H * sa.d_k, H * sa.d_k, H * sa.d_v], dim=-1)
        q, k, v = (y.reshape(N, H, 1, -1) for y in (q, k, v))  # (N, H, 1, d)
        if lay.plain:
            k_all, v_all = lay.cache.append(k, v)  # (N, H, t + 1, d)
            out = F.scaled_dot_product_attention(q, k_all, v_all)
        else:
            q, k = sa.encode_positions(q, k, t)
            k_all, v_all = lay.cache.append(k, v)
            out, _ = sa.attend(q, k_all, v_all, None, False, t)
        return self._affine(out.reshape(N, H * sa.d_v), lay.w.self_out)  # (N, D)

    def _cross_attention(self, lay: _Layer, x: Tensor) -> Tensor:
        ca = lay.layer.cross_attn
        N, H = x.size(0), ca.num_heads
        q = self._affine(x, lay.w.cross_q).reshape(N, H, 1, ca.d_k)  # (N, H, 1, d_k)
        out = F.scaled_dot_product_attention(q, lay.cross_k, lay.cross_v, attn_mask=self.src_mask)  # (N, H, 1, d_v)
        return self._affine(out.reshape(N, H * ca.d_v), lay.w.cross_out)

    def _ffn(self, lay: _Layer, x: Tensor) -> Tensor:
        return self._affine(torch.relu(self._affine(x, lay.w.ffn_1)), lay.w.ffn_2)  # eq. (2)

    @torch.no_grad()
    def step(self, prefix: Tensor) -> Tensor:
        """prefix (N, t + 1) -> log-probabilities of token t + 2 (N, V); only the newest token is fed."""
        t = prefix.size(1) - 1
        m = self.model
        x = F.embedding(prefix[:, -1], m.tgt_embed.weight) * self.scale  # (N, D), section 3.4
        x = x + m.tgt_pos.positions(1, t).to(x.dtype)  # (1, D) section 3.5; a 0-d zero for rope/relative
        for lay in self.layers:
            b = lay.layer
            if b.norm_first:
                x = x + self._self_attention(lay, _norm(x, b.norm1), t)
                x = x + self._cross_attention(lay, _norm(x, b.norm2))
                x = x + self._ffn(lay, _norm(x, b.norm3))
            else:  # section 3.1: LayerNorm(x + Sublayer(x))
                x = _norm(x + self._self_attention(lay, x, t), b.norm1)
                x = _norm(x + self._cross_attention(lay, x), b.norm2)
                x = _norm(x + self._ffn(lay, x), b.norm3)
        if m.decoder.final_norm is not None:
            x = _norm(x, m.decoder.final_norm)
        logits = m.generator(x) if self.generator is None else self._affine(x, self.generator)  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1)

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` of the state: beams reordered within their sentence and, when `index` is shorter
        than the rows held, the rows of finished sentences dropped (their encoder side goes too)."""
        shrink = index.numel() != self.src_mask.size(0)
        if shrink:
            self.src_mask = self.src_mask.index_select(0, index)
        for lay in self.layers:
            lay.cache.reorder(index)
            if shrink:
                lay.cross_k = lay.cross_k.index_select(0, index)
                lay.cross_v = lay.cross_v.index_select(0, index)
