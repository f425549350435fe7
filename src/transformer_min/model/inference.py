"""The decoder's weights as the one-token inference step uses them (section 6.1's searches; issues 18, 23).

`Transformer.inference_weights()` makes an `InferenceWeights` from the model's current parameters: W^Q, W^K,
W^V of each self-attention fused into one matrix (one GEMM instead of three), every weight in the layout
measured faster on this machine (core.speed.decode_weight_layout: W^T for torch.addmm, or W for F.linear) and,
where the CPU and the torch build allow it (`onednn_prepacked`) and oneDNN measured faster for its shape on this
machine (core.speed.decode_gemm), also reordered once into oneDNN's blocked layout, which the step's products
use (issue 37: 2x the GEMM speed of the BLAS call on an AVX-512 AMD EPYC; 2-4x slower than it at the small
shapes on an Intel Xeon with AMX, faster only on the output layer).
Whoever decodes makes one (a `tmin translate`/`tmin eval` call, an evaluation during training) and passes it
to the step (`DecoderLayer.step`, `Transformer.decode_step`); it is a copy, never looked up again, so a
weight changed afterwards (an optimizer step, a load) is seen by the next one made.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.hardware import cpu_capability
from transformer_min.core.speed import decode_gemm, decode_weight_layout
from transformer_min.model.step_kv import BufferPool

PREPACK_CAPABILITIES = ("AVX2", "AVX512")  # torch's x86 dispatch levels, where oneDNN runs its JIT GEMM kernels


@functools.cache
def onednn_prepacked() -> bool:
    """Whether the step's fp32 weights may be kept in oneDNN's blocked layout: on an x86 CPU with AVX2 or AVX-512
    (torch's dispatch level; oneDNN's JIT kernels) in a torch build with oneDNN and its prepacked linear operator
    (the one torch's CPU compiler uses for frozen linear layers). That is the capability; whether a weight of a
    given shape uses it is measured on this machine (core.speed.decode_gemm): oneDNN's reordered weight is
    packed once where the BLAS call may repack at every product of a step's few rows, but which is faster
    differs by CPU (docs/performance.md)."""
    if cpu_capability() not in PREPACK_CAPABILITIES or not torch.backends.mkldnn.is_available():
        return False
    try:  # a build may lack the private operators: probe them once
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(2, 3))
        torch.ops.mkldnn._linear_pointwise(torch.ones(1, 3), w, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return False
    return True


def onednn_weight(w: Tensor) -> Tensor | None:
    """W (out, in) reordered once into oneDNN's blocked layout for the step's products, or None (the BLAS call): an
    fp32 or bf16 CPU weight where `onednn_prepacked()` and oneDNN measured faster for its shape and dtype on this
    machine (core.speed.decode_gemm, which answers "blas" for bf16 without native bf16, AVX512_BF16 or AMX)."""
    if w.device.type != "cpu" or w.dtype not in (torch.float32, torch.bfloat16) or not onednn_prepacked():
        return None
    if decode_gemm(w.size(1), w.size(0), w.dtype) != "onednn":
        return None
    return torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous())


class Packed:
    """x W^T + b for one or more nn.Linear fused along the output axis, from a copy of their weights.

    transposed: W^T stored (in, out) contiguous, applied with torch.addmm; else W (out, in) with F.linear
    (with the few rows of a decoding step the GEMM library may repack one of the layouts every call).
    `onednn`: W reordered once for oneDNN (fp32 CPU weights where `onednn_prepacked()` and this shape's call
    measured faster on this machine, core.speed.decode_gemm), used instead of `w` for fp32 inputs outside
    autocast."""

    __slots__ = ("w", "b", "transposed", "onednn")

    def __init__(self, transposed: bool, *linears: nn.Linear):
        w = torch.cat([lin.weight for lin in linears])  # (out, in)
        self.b = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])  # (out,)
        self.w = w.t().contiguous() if transposed else w.clone()
        self.transposed = transposed
        self.onednn = onednn_weight(w) if w.dtype == torch.float32 else None
        if self.onednn is not None and self.b is not None:
            self.b = self.b.detach()

    def __call__(self, x: Tensor) -> Tensor:
        """x (N, in) -> (N, out)."""
        if self.onednn is not None and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            # the overload itself, not the packet (whose call checks its arguments in Python first: 1.2 us a call)
            return torch.ops.mkldnn._linear_pointwise.default(x, self.onednn, self.b, "none", [], "")
        # under autocast (an evaluation inside a bf16 training step), the BLAS call, which autocast casts
        if self.transposed:
            return x @ self.w if self.b is None else torch.addmm(self.b, x, self.w)
        return F.linear(x, self.w, self.b)

    def relu(self, x: Tensor) -> Tensor:
        """max(0, x W^T + b) (eq. (2)'s inner layer): x (N, in) -> (N, out), the max(0, .) in place on the new
        product. (oneDNN can apply it as a post-op of its product: the same values, but 3% slower over a batch-1
        decoding on an AVX-512 AMD EPYC, and 12% with the residual sum as a post-op too; docs/performance.md.)"""
        return torch.relu_(self(x))

    def add(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual + (x W^T + b) (a sub-layer's output added to its input, section 3.1): x (N, in), residual
        (N, out) -> (N, out); autocast's bf16 product is added to the fp32 residual in fp32, as before."""
        return residual + self(x)


class Norm:
    """A LayerNorm (section 3.1's Add & Norm) for the step: a copy of its weight and bias, applied with
    torch.layer_norm (the module call's hooks and parameter lookups cost more than the norm of a step's few rows)."""

    __slots__ = ("shape", "weight", "bias", "eps")

    def __init__(self, norm: nn.LayerNorm):
        self.shape, self.eps = tuple(norm.normalized_shape), norm.eps
        self.weight = None if norm.weight is None else norm.weight.detach().clone()
        self.bias = None if norm.bias is None else norm.bias.detach().clone()

    def __call__(self, x: Tensor) -> Tensor:
        return torch.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


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
    """One decoder layer's step weights; `norms`: its three LayerNorms, in the order of its sub-layers."""

    self_attn: AttentionWeights
    cross_attn: AttentionWeights
    feed_forward: FeedForwardWeights
    norms: tuple[Norm, Norm, Norm]


@dataclass(frozen=True)
class InferenceWeights:
    """Every decoder layer's step weights and the generator's (None: a generator that is not one nn.Linear,
    a wrapped one as in a verify check, is called as it is), and the decoder stack's final LayerNorm (pre-norm).
    `buffers`: the pool the self-attention caches of this decoding's batches take their buffers from and give them
    back to (model/step_kv.py), so a batch reuses the memory of the one before. `encoder`: where int8 runs the
    encoder's FFN in int8 (model/low_precision.py, `int8_encoder`), that copy of the encoder stack."""

    layers: tuple[LayerWeights, ...]
    generator: Packed | None
    transposed: bool
    final_norm: Norm | None = None
    precision: str = "fp32"  # of the products: "fp32" (Packed), "bf16" or "int8" (model/low_precision.py)
    encoder: nn.Module | None = None  # the encoder stack decoding runs: None, the model's; int8's own copy
    buffers: BufferPool = field(default_factory=BufferPool, compare=False, repr=False)


def layout_transposed(layout: str | None) -> bool:
    """"transposed" or "linear" (None: the layout measured on this machine, core.speed.decode_weight_layout)."""
    if layout is None:
        layout = decode_weight_layout()
    if layout not in ("transposed", "linear"):
        raise ValueError(f"layout: expected 'transposed' or 'linear', got {layout!r}")
    return layout == "transposed"
