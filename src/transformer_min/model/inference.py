"""The decoder's weights as the one-token inference step uses them (section 6.1's searches; issues 18, 23).

`Transformer.inference_weights()` makes an `InferenceWeights` from the model's current parameters: W^Q, W^K,
W^V of each self-attention fused into one matrix (one GEMM instead of three), every weight in the layout
measured faster on this machine (core.speed.decode_weight_layout: W^T for torch.addmm, or W for F.linear).
Whoever decodes makes one (a `tmin translate`/`tmin eval` call, an evaluation during training) and passes it
to the step (`DecoderLayer.step`, `Transformer.decode_step`); it is a copy, never looked up again, so a
weight changed afterwards (an optimizer step, a load) is seen by the next one made.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.speed import decode_weight_layout


class Packed:
    """x W^T + b for one or more nn.Linear fused along the output axis, from a copy of their weights.

    transposed: W^T stored (in, out) contiguous, applied with torch.addmm; else W (out, in) with F.linear
    (with the few rows of a decoding step the GEMM library may repack one of the layouts every call)."""

    __slots__ = ("w", "b", "transposed")

    def __init__(self, transposed: bool, *linears: nn.Linear):
        w = torch.cat([lin.weight for lin in linears])  # (out, in)
        self.b = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])  # (out,)
        self.w = w.t().contiguous() if transposed else w.clone()
        self.transposed = transposed

    def __call__(self, x: Tensor) -> Tensor:
        """x (N, in) -> (N, out)."""
        if self.transposed:
            return x @ self.w if self.b is None else torch.addmm(self.b, x, self.w)
        return F.linear(x, self.w, self.b)


@dataclass(frozen=True)
class AttentionWeights:
    """One attention's step weights: `q` is W^Q (encoder-decoder attention) or W^Q, W^K, W^V fused
    (self-attention, (D, H (2 d_k + d_v))); `out` is W^O (H d_v, D)."""

    q: Packed
    out: Packed


@dataclass(frozen=True)
class FeedForwardWeights:
    """W_1 (D, d_ff) and W_2 (d_ff, D) of eq. (2), with their biases."""

    w_1: Packed
    w_2: Packed


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's step weights."""

    self_attn: AttentionWeights
    cross_attn: AttentionWeights
    feed_forward: FeedForwardWeights


@dataclass(frozen=True)
class InferenceWeights:
    """Every decoder layer's step weights and the generator's (None: a generator that is not one nn.Linear,
    a wrapped one as in a verify check, is called as it is)."""

    layers: tuple[LayerWeights, ...]
    generator: Packed | None
    transposed: bool
    precision: str = "fp32"  # of the products: "fp32" (Packed), "bf16" or "int8" (model/low_precision.py)


def layout_transposed(layout: str | None) -> bool:
    """"transposed" or "linear" (None: the layout measured on this machine, core.speed.decode_weight_layout)."""
    if layout is None:
        layout = decode_weight_layout()
    if layout not in ("transposed", "linear"):
        raise ValueError(f"layout: expected 'transposed' or 'linear', got {layout!r}")
    return layout == "transposed"
