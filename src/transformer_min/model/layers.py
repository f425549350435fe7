"""Encoder and decoder layers, section 3.1 (Figure 1).

Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper) or,
with norm_first=True, x + Dropout(Sublayer(LayerNorm(x))) (pre-norm).
Deviation (opt-in): pre-norm is not the paper's; model.norm = "pre" selects it.
Dropout on each sub-layer output before the residual add is the paper's (section 5.4).
Each sub-layer's output shape is logged as `pass 3 encoder.layers.2.self_attn -> (2, 16, 512)` (after its
Add & Norm) at DEBUG, or at INFO after set_trace(True) (`tmin verify --trace`).

The layers take the attention and feed-forward modules they are given (model/build.py makes them from
the model.positional registry), so a position-aware attention needs no change here. An attention module is
called as attn(query=, key=, value=, mask=, need_weights=[, cache=, static_kv=]) -> (out, weights).

`DecoderLayer.step` is `forward` for one new position per row at inference (section 6.1's searches): the same
sub-layers and Add & Norm, no dropout, the KV cache, and weights prepared once per decoding
(model/inference.py; the attention module's `self_step`/`cross_step`, the FFN's `step`).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from transformer_min.model.dropout import Dropout
from transformer_min.model.inference import LayerWeights, Norm
from transformer_min.model.kv_cache import KVCache, LayerCache, StepCache

log = logging.getLogger(__name__)
_trace_level = logging.DEBUG  # INFO after set_trace(True) (`tmin verify --trace`)


def set_trace(on: bool) -> None:
    """Log the per-sub-layer shapes at INFO (`--trace`) instead of DEBUG (`--log-level DEBUG`)."""
    global _trace_level
    _trace_level = logging.INFO if on else logging.DEBUG


def tracing() -> bool:
    return not torch.compiler.is_compiling() and log.isEnabledFor(_trace_level)


def debug_shape(name: str, x: Tensor, pass_no: int | None = None) -> None:
    """Log one output shape: `pass 3 encoder.layers.2.self_attn -> (2, 16, 512)` (DEBUG, or INFO with --trace)."""
    if tracing():
        where = name if pass_no is None else f"pass {pass_no} {name}"
        log.log(_trace_level, "%-40s -> %s", where, tuple(x.shape))


class _Traced(nn.Module):
    """A layer that names itself in the trace: `trace_name` is its path in the model (Encoder/Decoder set
    `encoder.layers.2`), and each forward call is one pass (the model's pass number when it sits in a stack)."""

    trace_name = "layer"
    passes = 0

    def _next_pass(self) -> int:
        if tracing():
            self.passes += 1
        return self.passes

    def _trace(self, sub_layer: str, x: Tensor, pass_no: int) -> None:
        debug_shape(f"{self.trace_name}.{sub_layer}", x, pass_no)


class EncoderLayer(_Traced):
    """Encoder layer, section 3.1: multi-head self-attention, then the FFN, each with Add & Norm."""

    trace_name = "encoder_layer"

    def __init__(self, self_attn: nn.Module, feed_forward: nn.Module, d_model: int, dropout: float = 0.1,
                 norm_first: bool = False, layer_norm_eps: float = 1e-5):
        super().__init__()
        self.self_attn = self_attn  # 3.2.2 multi-head self-attention (or a position-aware one)
        self.feed_forward = feed_forward  # 3.3 eq. (2)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = Dropout(dropout)  # 5.4 residual dropout
        self.norm_first = norm_first

    def _sa_block(self, x: Tensor, mask: Tensor | None, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        out, weights = self.self_attn(query=x, key=x, value=x, mask=mask, need_weights=need_weights)
        return self.dropout(out), weights

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout(self.feed_forward(x))  # 3.3 eq. (2)

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D), weights (B, H, S, S) or None."""
        n = self._next_pass()
        if self.norm_first:
            attn, weights = self._sa_block(self.norm1(x), src_mask, need_weights)
            x = x + attn
            self._trace("self_attn", x, n)
            x = x + self._ff_block(self.norm2(x))
        else:
            attn, weights = self._sa_block(x, src_mask, need_weights)
            x = self.norm1(x + attn)  # 3.1: LayerNorm(x + Sublayer(x))
            self._trace("self_attn", x, n)
            x = self.norm2(x + self._ff_block(x))
        self._trace("feed_forward", x, n)
        return x, weights


class DecoderLayer(_Traced):
    """Decoder layer, section 3.1: masked self-attention, encoder-decoder attention, FFN.

    Encoder-decoder attention takes queries from the layer below and keys/values from the
    encoder output (`memory`, section 3.2.3).
    """

    trace_name = "decoder_layer"

    def __init__(self, self_attn: nn.Module, cross_attn: nn.Module, feed_forward: nn.Module, d_model: int,
                 dropout: float = 0.1, norm_first: bool = False, layer_norm_eps: float = 1e-5):
        super().__init__()
        self.self_attn = self_attn  # masked self-attention (3.2.3)
        self.cross_attn = cross_attn  # encoder-decoder attention (3.2.3)
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def _sa_block(self, x, mask, need_weights, cache):
        out, w = self.self_attn(query=x, key=x, value=x, mask=mask, need_weights=need_weights,
                                cache=None if cache is None else cache.self_kv)
        return self.dropout(out), w

    def _mha_block(self, x, memory, mask, need_weights, cache):
        out, w = self.cross_attn(query=x, key=memory, value=memory, mask=mask, need_weights=need_weights,
                                 cache=None if cache is None else cache.cross_kv, static_kv=True)
        return self.dropout(out), w

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, need_weights: bool = False,
                cache: LayerCache | None = None) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x (B, T, D), memory (B, S, D), src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T)
        -> (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, S) (None unless asked)."""
        n = self._next_pass()
        if self.norm_first:
            a, self_w = self._sa_block(self.norm1(x), tgt_mask, need_weights, cache)
            x = x + a
            self._trace("self_attn", x, n)
            a, cross_w = self._mha_block(self.norm2(x), memory, src_mask, need_weights, cache)
            x = x + a
            self._trace("cross_attn", x, n)
            x = x + self.dropout(self.feed_forward(self.norm3(x)))
        else:
            a, self_w = self._sa_block(x, tgt_mask, need_weights, cache)
            x = self.norm1(x + a)
            self._trace("self_attn", x, n)
            a, cross_w = self._mha_block(x, memory, src_mask, need_weights, cache)
            x = self.norm2(x + a)
            self._trace("cross_attn", x, n)
            x = self.norm3(x + self.dropout(self.feed_forward(x)))
        self._trace("feed_forward", x, n)
        return x, self_w, cross_w

    # ---------------------------------------------------------------- the one-token inference step
    def step_weights(self, transposed: bool) -> LayerWeights:
        """A copy of this layer's weights as `step` uses them (model/inference.py)."""
        return LayerWeights(self.self_attn.step_weights(transposed, fuse_kv=True),
                            self.cross_attn.step_weights(transposed, fuse_kv=False),
                            self.feed_forward.step_weights(transposed),
                            (Norm(self.norm1), Norm(self.norm2), Norm(self.norm3)))

    def start_step(self, memory: Tensor, self_kv=None) -> StepCache:
        """The state `step` starts from: an empty self-attention cache (`self_kv`, a layer's part of a
        model/step_kv.StepKV, or a new KVCache) and the encoder-decoder keys and values of memory (N, S, D),
        projected once, each made contiguous: the heads' view of the projection cannot fold (N, H) into the one batch
        axis of eq. (1)'s products, which then copied K and V at every step (issue 37: 4% of int8's batch-32 time)."""
        k, v = self.cross_attn.project_kv(memory, memory)  # (N, H, S, d_k), (N, H, S, d_v)
        return StepCache(KVCache() if self_kv is None else self_kv, k.contiguous(), v.contiguous())

    def step(self, x: Tensor, t: int, cache: StepCache, w: LayerWeights, src_mask: Tensor | None) -> Tensor:
        """`forward` for the newest position only, at inference: x (N, D) at position t, src_mask (N, 1, 1, S)
        -> (N, D). The same three sub-layers and Add & Norm (post-norm, section 3.1, or pre-norm), no dropout."""
        sa, ca, ff = self.self_attn, self.cross_attn, self.feed_forward
        norm1, norm2, norm3 = w.norms
        # each sub-layer adds its input (`residual`) to its output itself, through its last product's `add`
        if self.norm_first:  # x + Sublayer(LayerNorm(x))
            x = sa.self_step(norm1(x), t, cache.self_kv, w.self_attn, residual=x)
            x = ca.cross_step(norm2(x), cache.cross_k, cache.cross_v, src_mask, w.cross_attn, residual=x)
            return ff.step(norm3(x), w.feed_forward, residual=x)
        # post-norm, section 3.1: LayerNorm(x + Sublayer(x))
        x = norm1(sa.self_step(x, t, cache.self_kv, w.self_attn, residual=x))
        x = norm2(ca.cross_step(x, cache.cross_k, cache.cross_v, src_mask, w.cross_attn, residual=x))
        return norm3(ff.step(x, w.feed_forward, residual=x))
