"""Speed measured on this machine: the matmul probe of `tmin doctor`, and the weight layout of the inference
step (decoding/lean.py), measured once per machine and cached like the attention kernel (core/hardware.py)."""

from __future__ import annotations

import functools
import time

import torch

from transformer_min.core.hardware import machine_key, measured_choice, median_seconds


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
