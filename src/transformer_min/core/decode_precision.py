"""The arithmetic of decoding (`decode.precision`, `--precision` of tmin translate/eval; issue 37).

  fp32   the paper's arithmetic: the default, whose outputs are the project's reference
  bf16   the decoder's and the generator's matrix products in bf16 (fp32 everywhere else)
  int8   the same products as int8 GEMMs of weights quantised per output channel, activations per call
         (PyTorch's dynamic quantization kernels: fbgemm/x86, onednn or qnnpack), and the encoder's FFN in int8
         (activations per token) where that measured faster on this machine
  auto   bf16 where the CPU does bf16 natively (AVX512_BF16 or AMX tiles), else fp32

As with train.precision (core/hardware.py), `auto` is decided from the CPU's capability, never from a timing on
the CPU at hand: on AVX2 bf16 is emulated and slow, so auto is fp32 there, and an explicit bf16 warns.
int8 needs a quantized engine in the torch build; where it has none the request is refused with the fix.
"""

from __future__ import annotations

import torch

from transformer_min.core.errors import ConfigError
from transformer_min.core.hardware import Precision, cpu_info, resolve_precision
from transformer_min.core.i18n import tr

DECODE_PRECISIONS = ("fp32", "auto", "bf16", "int8")
INT8_ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")  # torch.backends.quantized engines that run int8 GEMMs


def int8_engine() -> str | None:
    """The quantized engine int8 decoding runs on: torch's current one when it is an int8 engine, else the first
    this build supports; None when the build has none (or lacks the dynamic int8 linear operator)."""
    try:
        supported = list(torch.backends.quantized.supported_engines)
        current = torch.backends.quantized.engine
        torch.ops.quantized.linear_dynamic  # noqa: B018 - raises where the operator is not built in
    except (AttributeError, RuntimeError):
        return None
    if current in INT8_ENGINES and current in supported:
        return current
    return next((e for e in INT8_ENGINES if e in supported), None)


def supported_engines() -> str:
    """torch.backends.quantized.supported_engines as text (for the refusal)."""
    try:
        return ", ".join(torch.backends.quantized.supported_engines) or "none"
    except (AttributeError, RuntimeError):
        return "none"


def resolve_decode_precision(requested: str, field: str = "decode.precision") -> Precision:
    """The decision table of decode.precision on the CPU: what `requested` (`field` names where it was set)
    decodes in, and why. auto: bf16 with native bf16 (AVX512_BF16 or AMX), else fp32; bf16 given on a CPU
    without it: used, with a warning; int8 without a quantized engine: ConfigError naming the fix."""
    if requested not in DECODE_PRECISIONS:
        raise ConfigError(tr("{field} = {requested!r}: expected one of {items}").format(
            field=field, requested=requested, items=", ".join(DECODE_PRECISIONS)))
    if requested == "fp32":
        return Precision("fp32", "fp32", tr("the paper's arithmetic (set in {field})").format(field=field))
    if requested == "int8":
        engine = int8_engine()
        if engine is None:
            raise ConfigError(tr("{field} = \"int8\": this torch build has no quantized engine (fbgemm, onednn or "
                                 "qnnpack; it has: {engines}); fix: decode with fp32 or bf16, or install a torch "
                                 "build that has one (the standard x86-64 and ARM builds do)").format(
                                     field=field, engines=supported_engines()))
        return Precision("int8", "int8", tr("int8 GEMMs on the quantized engine {engine}, or on onednn for the weight "
                                            "shapes and row counts where it measured faster on this machine "
                                            "(int8_gemm.json)").format(engine=engine))
    if requested == "auto":  # train.precision's rule on the CPU: bf16 exactly where it is native
        return resolve_precision("auto", "cpu")
    info = cpu_info()
    warning = "" if info.native_bf16 else tr(
        "{field} = \"bf16\" on a CPU without native bf16 (capability {flags}; neither AVX512_BF16 nor AMX): bf16 is "
        "emulated here and may be slower than fp32; fix: decode with fp32, or auto").format(field=field,
                                                                                          flags=info.flags)
    return Precision("bf16", "bf16", tr("set in {field}").format(field=field), warning)
