"""The inference step's matrix products in bf16 or int8 (decode.precision; issue 37).

`with_precision` turns the fp32 `InferenceWeights` of `Transformer.inference_weights()` into weights of the same
shape whose every `Packed` (W^Q/W^K/W^V fused, W^O, W_1, W_2, the generator) is one of:
- `Bf16Linear`: W stored in bf16 (W^T for addmm, or reordered once for oneDNN where the CPU has native bf16 and
  that call measured faster for its shape); x is rounded to bf16, the product accumulated by the GEMM library, the
  result returned in fp32 (LayerNorm, softmax, the caches and the search stay fp32);
- `Int8Linear`: W quantised to int8 symmetrically per output row (scale = max |w_ij| / 127), prepacked for
  the quantized engine measured faster for its shape at a step's few rows and at many (x86 and oneDNN);
  x quantised per call (PyTorch's dynamic quantization, `quantized::linear_dynamic`), the result in fp32.
bf16 changes only the decoder step. int8 also runs the encoder's position-wise FFN (eq. (2), two thirds of its
products) in int8 where that measured faster on this machine (`int8_encoder`: a copy of the encoder stack whose
W_1, W_2 are `RowInt8Linear`, each token's activations quantised with its own scale, as CTranslate2 int8 quantises
its encoder); the encoder's attention and the encoder-decoder keys and values stay fp32. fp32 weights are returned
as they are: the paper path is untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import torch
from torch import Tensor, nn

from transformer_min.core.decode_precision import int8_engine
from transformer_min.core.speed import MANY_FROM, int8_gemm_engines, int8_rows_faster, prepack, reduce_range
from transformer_min.model.feed_forward import PositionwiseFeedForward
from transformer_min.model.inference import InferenceWeights, Packed, onednn_weight


def _weight(p: Packed) -> Tensor:
    """W (out, in) of a Packed, whichever layout it stores."""
    return p.w.t() if p.transposed else p.w


def row_scales(w: Tensor) -> Tensor:
    """Symmetric int8 scales of W (out, in), one per output row: max_j |w_ij| / 127 (a zero row: a tiny one)."""
    return (w.abs().amax(dim=1) / 127).clamp(min=1e-12)  # (out,)


class _FreshProduct:
    """`relu` and `add` of a product whose every call returns a new fp32 tensor (bf16's, int8's), as Packed's:
    the max(0, .) and the residual sum are taken in place on it."""

    __slots__ = ()

    def relu(self, x: Tensor) -> Tensor:
        """max(0, x W^T + b), as Packed.relu."""
        return torch.relu_(self(x))

    def add(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual + (x W^T + b), as Packed.add."""
        return self(x).add_(residual)


class Bf16Linear(_FreshProduct):
    """x W^T + b with W and b in bf16: x (N, in) fp32 -> (N, out) fp32.

    W is kept in one layout: reordered once for oneDNN where the CPU has native bf16 (AVX512_BF16, AMX) and oneDNN
    measured faster than addmm for this shape in bf16 (model/inference.py, `onednn_weight`; on an AVX-512 AMD EPYC:
    153 against 311 us for 4 x 256 x 8000), else W^T (in, out) for addmm."""

    __slots__ = ("w", "b", "onednn")

    def __init__(self, p: Packed):
        w = _weight(p).to(torch.bfloat16)  # (out, in)
        self.onednn = onednn_weight(w)
        self.w = None if self.onednn is not None else w.t().contiguous()  # (in, out)
        self.b = None if p.b is None else p.b.to(torch.bfloat16)

    def __call__(self, x: Tensor) -> Tensor:
        x = x.to(torch.bfloat16)
        if self.onednn is not None:
            y = torch.ops.mkldnn._linear_pointwise.default(x, self.onednn, self.b, "none", [], "")
        else:
            y = x @ self.w if self.b is None else torch.addmm(self.b, x, self.w)
        return y.float()


class Int8Linear(_FreshProduct):
    """x W^T + b with W in int8 (per-row scales), x quantised per call: x (N, in) fp32 -> (N, out) fp32.

    The weight is prepacked for the quantized engine measured faster for its shape at a step's few rows and,
    where another was faster at many rows, for that one too; a call with `MANY_FROM` rows or more takes the
    latter (core.speed.int8_gemm_engines). The engines round differently (fbgemm's x86 kernels take 7-bit
    activations, oneDNN's 8 only where the CPU sums them exactly: core.speed.reduce_range), so int8 outputs may
    differ between a beam of one sentence and of many, as the per-call activation scale already makes them."""

    __slots__ = ("few", "many", "_linear", "_linear_relu")

    def __init__(self, p: Packed, engine: str):
        self._linear, self._linear_relu = _direct("linear_dynamic"), _direct("linear_relu_dynamic")
        w = _weight(p).float().contiguous()
        scales = row_scales(w).double()  # (out,)
        zeros = torch.zeros(w.size(0), dtype=torch.long)
        few, many = int8_gemm_engines(w.size(1), w.size(0), engine)
        bias = None if p.b is None else p.b.float()
        with warnings.catch_warnings():  # torch flags its quantized-tensor constructors for a later removal
            warnings.simplefilter("ignore", UserWarning)
            q = torch.quantize_per_channel(w, scales, zeros, 0, torch.qint8)
            self.few = _prepacked(q, bias, few)
            self.many = self.few if many == few else _prepacked(q, bias, many)

    def _packed(self, x: Tensor) -> tuple[object, bool]:
        """The prepacked weight and its reduce_range for a call with x's rows."""
        return self.many if x.size(0) >= MANY_FROM else self.few

    def __call__(self, x: Tensor) -> Tensor:
        return self._linear(x, *self._packed(x))

    def relu(self, x: Tensor) -> Tensor:
        """max(0, x W^T + b), as Packed.relu: the quantized engine's dynamic linear with ReLU (one operator)."""
        return self._linear_relu(x, *self._packed(x))


def _direct(name: str):
    """The operator torch.ops.quantized.<name>.default as its C++ entry point. The overload's own call first walks
    its arguments in Python for a FakeScriptObject (a stand-in that only export's tracing passes; a step's products
    are never traced), about 1.4 us a call, and the operator packet's call adds 0.7 us more; with 19 products a
    batch-1 step spent about 3% of its time there. Where a torch release keeps no such entry point: the overload."""
    overload = getattr(torch.ops.quantized, name).default
    return getattr(overload, "_op", overload)


def _prepacked(q: Tensor, bias: Tensor | None, engine: str) -> tuple[object, bool]:
    """(q prepacked for `engine`, its reduce_range, core.speed.reduce_range)."""
    return prepack(q, bias, engine), reduce_range(engine)


class RowInt8Linear(nn.Module):
    """x W^T + b with W in int8 (per output row, scale s_W = max_j |w_ij| / 127) and each row of x in int8 with its
    own scale (s_x = max_j |x_j| / 127), the products summed exactly in int32 (`torch._int_mm`) and scaled back:
    y = (q_x q_W^T) s_x s_W + b. x (R, in) fp32 -> (R, out) fp32.

    For the encoder, whose calls hold all of a batch's tokens: one scale per call (the step's `Int8Linear`) would
    let one token's large activations coarsen every other token's (the encoder in that int8 lost 0.34 BLEU on
    Multi30k De->En). Per row, a sentence's result does not depend on what else is in its batch."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()  # (out, in)
        scale = row_scales(w)  # (out,)
        self.register_buffer("w_t", torch.round(w / scale[:, None]).to(torch.int8).t().contiguous())  # (in, out)
        self.register_buffer("w_scale", scale / 127)  # (out,), with the activations' 1 / 127 folded in
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    def forward(self, x: Tensor) -> Tensor:
        # (R, 1): max_j |x_j| (the same value as vector_norm(x, inf), whose CPU kernel took 17x as long here)
        s = x.abs().amax(dim=1, keepdim=True).clamp_min_(1e-12)
        q = torch.mul(x, torch.div(127.0, s)).round_().to(torch.int8)  # (R, in), in [-127, 127]
        y = torch.mul(torch._int_mm(q, self.w_t), s).mul_(self.w_scale)  # (R, out): int32 sums scaled back
        return y if self.bias is None else y.add_(self.bias)


def int8_encoder(encoder: nn.Module) -> nn.Module | None:
    """A copy of `encoder` (eval mode, no gradients) whose position-wise FFNs' W_1 and W_2 are `RowInt8Linear`,
    each where that measured faster than fp32 for its shape on this machine (core.speed.int8_rows_faster); None
    where none is (the encoder then runs in fp32). `encoder` itself is not changed."""
    ffns = [m for m in encoder.modules() if isinstance(m, PositionwiseFeedForward)]
    swap = {id(lin) for f in ffns for lin in (f.w_1, f.w_2) if isinstance(lin, nn.Linear)
            and int8_rows_faster(lin.in_features, lin.out_features, RowInt8Linear)}
    if not swap:
        return None
    # deepcopy takes an object found in its memo as already copied: each swapped nn.Linear becomes its int8 product
    memo = {id(lin): RowInt8Linear(lin) for f in ffns for lin in (f.w_1, f.w_2) if id(lin) in swap}
    return copy.deepcopy(encoder, memo).eval().requires_grad_(False)


def with_precision(w: InferenceWeights, precision: str, encoder: nn.Module | None = None) -> InferenceWeights:
    """`w` with every product in `precision` ("fp32": `w` itself, "bf16" or "int8"); for int8 and the model's
    `encoder` given, also `int8_encoder(encoder)` (InferenceWeights.encoder). int8 needs a quantized engine
    (core.decode_precision.resolve_decode_precision refuses first where there is none)."""
    if precision == "fp32":
        return w
    if precision == "bf16":
        def convert(p):
            return Bf16Linear(p)
    elif precision == "int8":
        engine = int8_engine()
        if engine is None:
            raise RuntimeError("int8 decoding: this torch build has no quantized engine")
        torch.backends.quantized.engine = engine

        def convert(p):
            return Int8Linear(p, engine)
    else:
        raise ValueError(f"precision: expected 'fp32', 'bf16' or 'int8', got {precision!r}")

    def pair(x):  # AttentionWeights or FeedForwardWeights: two Packed fields
        return dataclasses.replace(x, **{f.name: convert(getattr(x, f.name)) for f in dataclasses.fields(x)})

    with torch.inference_mode(False), torch.no_grad():
        layers = tuple(dataclasses.replace(lw, self_attn=pair(lw.self_attn), cross_attn=pair(lw.cross_attn),
                                           feed_forward=pair(lw.feed_forward)) for lw in w.layers)
        gen = None if w.generator is None else convert(w.generator)
        enc = int8_encoder(encoder) if precision == "int8" and encoder is not None else None
    return dataclasses.replace(w, layers=layers, generator=gen, precision=precision, encoder=enc)
