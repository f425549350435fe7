"""Speed measured on this machine: the matmul probe of `tmin doctor`, and the weight layout of the inference
step (decoding/lean.py), measured once per machine and cached like the attention kernel (core/hardware.py)."""

from __future__ import annotations

import functools
import math
import time

import torch

from transformer_min.core.hardware import cpu_info, machine_key, measured_choice, median_seconds


def matmul_gflops(dtype: torch.dtype, seconds: float = 1.0, n: int = 1024,
                  device: str = "cpu") -> float:
    """GFLOP/s of (n, n) @ (n, n) in `dtype` over about `seconds` (at least 2 matmuls)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b  # warm-up
    sync()
    count, t0 = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - t0 < seconds:
        a @ b
        count += 1
        sync()
    return 2 * n**3 * count / (time.perf_counter() - t0) / 1e9


def faster(timings: dict, a: str, b: str, cases) -> str:
    """`a` or `b`, whichever measured faster over `cases` (timings[f"{a}_{case}_ms"] against b's): `a` where the
    product of its time ratios to `b` is below 1 (their geometric mean), so each case weighs the same whatever its
    size (a step's few rows and a batch's many), and naming the two the other way round picks the same one (only
    an exact tie goes to `b`)."""
    return a if math.prod(timings[f"{a}_{c}_ms"] / timings[f"{b}_{c}_ms"] for c in cases) < 1 else b


@functools.lru_cache(maxsize=None)
def decode_weight_layout() -> str:
    """"transposed" or "linear": how the inference step (decoding/lean.py) stores its fp32 weights on the CPU.

    "transposed": W^T (in, out) for torch.addmm; "linear": W (out, in) for F.linear. With the few rows of a
    decoding step the GEMM library may repack one layout every call: on one AVX-512/AMX CPU addmm with W^T
    took 352 us against 618 for F.linear on the 256 x 8000 output layer at 4 rows. Measured once per machine
    at decoding shapes (4 rows; 256 -> 1024 and 256 -> 8000) and cached (`measured_choice`)."""
    import torch.nn.functional as F

    def measure() -> dict:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(4, 256, generator=g)
        ws = [torch.randn(n, 256, generator=g) for n in (1024, 8000)]
        wts = [w.t().contiguous() for w in ws]
        b = [torch.zeros(w.size(0)) for w in ws]
        with torch.inference_mode():
            linear = median_seconds(lambda: [F.linear(x, w, bb) for w, bb in zip(ws, b)], reps=7)
            addmm = median_seconds(lambda: [torch.addmm(bb, x, wt) for wt, bb in zip(wts, b)], reps=7)
        return {"linear_ms": linear * 1e3, "transposed_ms": addmm * 1e3,
                "layout": "transposed" if addmm < linear else "linear"}

    return measured_choice("decode_weight_layout.json", machine_key(torch.float32), "layout",
                           ("transposed", "linear"), measure)


@functools.lru_cache(maxsize=None)
def decode_gemm(in_features: int, out_features: int, dtype: torch.dtype = torch.float32) -> str:
    """"onednn" or "blas": which call the inference step uses for a weight of this shape and dtype (fp32, or bf16
    for decode.precision "bf16") on the CPU, where oneDNN's prepacked linear is available (model/inference.py,
    `onednn_prepacked`).

    "onednn": the weight reordered once into oneDNN's blocked layout; "blas": torch.addmm with W^T or F.linear,
    in the `decode_weight_layout` measured here (bf16: addmm with W^T, model/low_precision.py). Neither wins
    everywhere: at 4 rows oneDNN ran 2x faster than the BLAS call on an AVX-512 AMD EPYC and 2-4x slower at
    256 x 256 and 256 x 768 on an Intel Xeon with AMX, where it won only the 256 x 8000 output layer
    (docs/performance.md). Measured once per machine, dtype and shape, at 4 and at 128 rows (a beam of 4 for one
    sentence and for 32), the product of the two time ratios deciding, and cached (`measured_choice`).
    bf16 without native bf16 (AVX512_BF16 or AMX) is "blas", unmeasured: oneDNN has no bf16 reorder there (on an
    AVX2-only AMD EPYC `_reorder_linear_weight` raised); `model.inference.onednn_weight` relies on this rule."""
    import torch.nn.functional as F

    if dtype == torch.bfloat16 and not cpu_info().native_bf16:
        return "blas"

    def measure() -> dict:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(out_features, in_features, generator=g).to(dtype)
        wt, b = w.t().contiguous(), torch.zeros(out_features, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(w)
        transposed = dtype != torch.float32 or decode_weight_layout() == "transposed"
        out = {}
        with torch.inference_mode():
            for rows in (4, 128):
                x = torch.randn(rows, in_features, generator=g).to(dtype)
                calls = 20 if rows == 4 else 4  # each timing spans many calls: a single small GEMM is microseconds
                out[f"onednn_{rows}_ms"] = median_seconds(lambda: [torch.ops.mkldnn._linear_pointwise.default(
                    x, packed, b, "none", [], "") for _ in range(calls)], reps=7) * 1e3 / calls
                out[f"blas_{rows}_ms"] = median_seconds(lambda: [torch.addmm(b, x, wt) if transposed else
                                                                 F.linear(x, w, b) for _ in range(calls)],
                                                        reps=7) * 1e3 / calls
        return {**out, "gemm": faster(out, "onednn", "blas", (4, 128))}

    key = f"{machine_key(dtype)} | {in_features} x {out_features}"
    return measured_choice("decode_gemm.json", key, "gemm", ("onednn", "blas"), measure)


FEW, MANY = 4, 128  # rows of a decoding step: a beam of 4 for one sentence, for 32
MANY_FROM = 16  # a product of this many rows or more takes the engine measured at MANY rows, fewer at FEW's


def reduce_range(engine: str) -> bool:
    """Whether `quantized::linear_dynamic` on this quantized engine takes 7-bit activations. fbgemm's int8 kernels
    (x86) always do. oneDNN's do where its 8-bit products are not summed exactly (`int8_sums_exact`): without int8
    dot-product instructions (VNNI, AMX) a CPU adds each pair of u8 x s8 products in 16 bits, which saturates at
    8 bits (on an AVX2-only AMD EPYC a 256 x 8000 product was 17% off at its largest entry, 2% with 7 bits).
    qnnpack's take 8."""
    if engine in ("x86", "fbgemm"):
        return True
    return engine == "onednn" and not int8_sums_exact(engine)


@functools.lru_cache(maxsize=None)
def int8_sums_exact(engine: str) -> bool:
    """Whether `engine`'s dynamic int8 linear with 8-bit activations sums its products without saturating: a probe
    whose activations quantise to the top code (255) against weights at 127, where pairs summed in 16 bits clip
    (64,770 > 32,767). Decided from what the kernels do, not from CPU flags (a VM or ONEDNN_MAX_CPU_ISA may hold
    oneDNN below what the flags say). A probe that fails counts as not exact (7 bits are always safe)."""
    x = torch.ones(4, 64)
    x[:, 0] = -1.0  # (4, 64): the range [-1, 1], 63 of 64 entries at the top code
    try:
        y = torch.ops.quantized.linear_dynamic(x, prepack(int8_rows(torch.ones(8, 64)), None, engine), False)
        return bool((y - 62.0).abs().max() < 0.5)  # exact: 63 - 1 = 62 per entry
    except (RuntimeError, ValueError):
        return False


def int8_rows(w: torch.Tensor) -> torch.Tensor:
    """W (out, in) as a per-channel qint8 tensor, each output row at scale max_j |w_ij| / 127."""
    import warnings

    with warnings.catch_warnings():  # torch flags its quantized-tensor constructors for a later removal
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_channel(w, (w.abs().amax(dim=1) / 127).double(),
                                          torch.zeros(w.size(0), dtype=torch.long), 0, torch.qint8)


def prepack(q: torch.Tensor, bias: torch.Tensor | None, engine: str) -> object:
    """q prepacked for `engine`'s `quantized::linear_dynamic`; the global quantized engine is left as it was (a
    packed weight carries its engine's kernels)."""
    before = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine
        return torch.ops.quantized.linear_prepack(q, bias)
    finally:
        torch.backends.quantized.engine = before


def int8_gemm_key(in_features: int, out_features: int, engines) -> str:
    """`int8_gemm.json`'s key: the machine, the shape and each candidate engine with the activation bits it runs with
    (`reduce_range`), so a choice timed with other bits is measured again."""
    bits = "/".join(f"{e} {7 if reduce_range(e) else 8}-bit" for e in engines)
    return f"{machine_key(torch.float32)} | {in_features} x {out_features} | {bits}"


@functools.lru_cache(maxsize=None)
def int8_gemm_engines(in_features: int, out_features: int, default: str) -> tuple[str, str]:
    """(few, many): the quantized engine of int8 decoding (model/low_precision.py) for a weight of this shape,
    at fewer than `MANY_FROM` rows and at more. `default` is core.decode_precision.int8_engine(); the other
    candidate is "onednn" where this build has it. On the Intel Xeon with AMX, x86's dynamic int8 linear took
    22 us at 4 rows where oneDNN's took 38, and 1.5 ms against 0.6 for 128 x 256 x 8000 (docs/performance.md).
    Measured once per machine and shape, at FEW and MANY rows, and cached (`measured_choice`)."""
    candidates = [default] + (["onednn"] if default != "onednn" and
                              "onednn" in torch.backends.quantized.supported_engines else [])
    if len(candidates) == 1:
        return default, default

    def measure() -> dict:
        g = torch.Generator().manual_seed(0)
        q, out = int8_rows(torch.randn(out_features, in_features, generator=g)), {}
        for engine in candidates:
            packed = prepack(q, torch.zeros(out_features), engine)
            for rows in (FEW, MANY):
                x = torch.randn(rows, in_features, generator=g)
                calls = 20 if rows == FEW else 4
                out[f"{engine}_{rows}_ms"] = median_seconds(lambda: [torch.ops.quantized.linear_dynamic.default(
                    x, packed, reduce_range(engine)) for _ in range(calls)], reps=7) * 1e3 / calls
        pick = [min(candidates, key=lambda e: out[f"{e}_{rows}_ms"]) for rows in (FEW, MANY)]
        return {**out, "engines": "/".join(pick)}

    key = int8_gemm_key(in_features, out_features, candidates)
    choices = tuple(f"{a}/{b}" for a in candidates for b in candidates)
    few, many = measured_choice("int8_gemm.json", key, "engines", choices, measure).split("/")
    return few, many


@functools.cache
def int8_rows_available() -> bool:
    """Whether this torch build multiplies int8 matrices into exact int32 sums on the CPU (`torch._int_mm`), which
    int8 decoding's encoder products take (model/low_precision.py, `RowInt8Linear`)."""
    try:
        a = torch.ones(2, 8, dtype=torch.int8)
        return bool(torch._int_mm(a, a.t().contiguous()).eq(8).all())
    except (AttributeError, RuntimeError, TypeError):
        return False


ENCODER_ROWS = (16, 512)  # the encoder's rows per call: one sentence's tokens, a batch of 32 sentences'


# What `int8_rows_faster` times, in its cache key: an entry measured with an earlier form of the product is measured
# again (form 2: the row scales by abs().amax, 17x faster than torch.linalg.vector_norm(inf) at 480 x 1024 here)
ROW_INT8_FORM = 2


@functools.lru_cache(maxsize=None)
def int8_rows_faster(in_features: int, out_features: int, make) -> bool:
    """Whether the encoder's int8 product (each row of x quantised with its own scale, `torch._int_mm`, then
    scaled back: model/low_precision.py, `RowInt8Linear`, given as `make`, nn.Linear -> the product) is faster on
    this machine than fp32's F.linear for a weight of this shape. On an AVX-512 AMD EPYC with VNNI it took 510
    against 1,625 us at 300 x 256 x 1024; a CPU without int8 dot-product instructions may gain nothing. Measured once
    per machine and shape at `ENCODER_ROWS`, the product of the two time ratios deciding, and cached
    (`measured_choice`)."""
    import torch.nn.functional as F

    if not int8_rows_available():
        return False

    def measure() -> dict:
        g = torch.Generator().manual_seed(0)
        linear = torch.nn.Linear(in_features, out_features)
        with torch.inference_mode():
            int8, out = make(linear), {}
            for rows in ENCODER_ROWS:
                x = torch.randn(rows, in_features, generator=g)
                calls = 8 if rows == ENCODER_ROWS[0] else 2
                out[f"int8_{rows}_ms"] = median_seconds(lambda: [int8(x) for _ in range(calls)], reps=7) * 1e3 / calls
                out[f"fp32_{rows}_ms"] = median_seconds(lambda: [F.linear(x, linear.weight, linear.bias)
                                                                 for _ in range(calls)], reps=7) * 1e3 / calls
        return {**out, "encoder": faster(out, "int8", "fp32", ENCODER_ROWS)}

    key = f"{machine_key(torch.float32)} | {in_features} x {out_features} | form {ROW_INT8_FORM}"
    return measured_choice("int8_rows.json", key, "encoder", ("int8", "fp32"), measure) == "int8"


@functools.lru_cache(maxsize=None)
def few_query_kernel(heads: int, d_k: int, d_v: int, matmul_form) -> str:
    """"fused" or "matmul": eq. (1) of a decoding step with few query rows (one sentence's beams, fewer than
    `MANY_FROM`), as torch's fused kernel (F.scaled_dot_product_attention: one operator) or as `matmul_form`
    (model/attention.py, `few_query_attention`: two batched products and a softmax, 5 operators). With 4 rows the
    operators' fixed costs weigh more than the arithmetic: on an AVX-512 AMD EPYC the fused kernel took 19 against
    27 us (self-attention over 15 positions) and 13 against 25 us (a sentence's 4 beams against its 14 source
    positions). At many rows the batched products stay (they read the caches faster there, docs/performance.md).
    Measured once per machine and shape at `FEW` rows, self- and encoder-decoder attention over 16 positions, the
    product of the two time ratios deciding, and cached (`measured_choice`)."""
    import torch.nn.functional as F

    def measure() -> dict:
        g = torch.Generator().manual_seed(0)
        shapes = {"self": ((FEW, heads, 1), (FEW, heads, 16)), "cross": ((1, heads, FEW), (1, heads, 16))}
        out = {}
        with torch.inference_mode():
            for name, (q_shape, kv_shape) in shapes.items():
                q = torch.randn(*q_shape, d_k, generator=g)
                k, v = torch.randn(*kv_shape, d_k, generator=g), torch.randn(*kv_shape, d_v, generator=g)
                out[f"fused_{name}_ms"] = median_seconds(lambda: [F.scaled_dot_product_attention(q, k, v)
                                                                  for _ in range(50)], reps=7) * 1e3 / 50
                out[f"matmul_{name}_ms"] = median_seconds(lambda: [matmul_form(q, k, v) for _ in range(50)],
                                                          reps=7) * 1e3 / 50
        return {**out, "kernel": faster(out, "fused", "matmul", shapes)}

    key = f"{machine_key(torch.float32)} | {heads} heads x {d_k}, {d_v}"
    return measured_choice("few_query_kernel.json", key, "kernel", ("fused", "matmul"), measure)
