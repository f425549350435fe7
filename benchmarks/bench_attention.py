"""Benchmark: our MultiHeadAttention (fast path) against torch.nn.MultiheadAttention, CPU float32.

    python benchmarks/bench_attention.py                 # B 8, d_model 512, h 8, L 32 128 512 1024
    python benchmarks/bench_attention.py --quick         # CI smoke test: L 32 128, few repetitions
    python benchmarks/bench_attention.py --lengths 256,2048 --reps 5 --threads 4
    python benchmarks/bench_attention.py --precision bf16 --batch 200 --d-model 256 --heads 4 \
        --lengths 9,18,30 --modes fwd+bwd           # Multi30k training shapes under bf16 autocast

Both modules hold the same weights (checked before timing) and compute self-attention without a
mask, need_weights=False. Two modes:
  forward   eval(), under torch.inference_mode()  (torch may take its fused native fast path here)
  fwd+bwd   train() with dropout 0, forward then backward with a fixed upstream gradient
Timing is interleaved: each repetition runs both, alternating which goes first, and the table shows
medians. Memory is "peak": the largest amount of torch CPU tensor memory held at once during one
call beyond what was live before it (weights, inputs), summed from torch.profiler's allocation and
free events (profile_memory=True). It counts torch allocations only, not the Python heap or the
process RSS. "kernels" lists the attention ops the profiler saw, so one can tell which path ran.

--precision bf16 runs both under torch.autocast("cpu", torch.bfloat16) (the weights stay fp32, as in
training); ours is given kernel="matmul" (eq. (1) as two matmuls, what build_model picks where
hardware.attention_kernel measured that faster), torch takes the fused SDPA kernel.

--fusion compares, in the same run and interleaved, our module (three projections W^Q, W^K, W^V) with
FusedQKVAttention (one nn.Linear holding [W^Q; W^K; W^V] as a real parameter) instead of torch's
module (issue 14: the fusion is kept only if it pays > 10% here and in bench_decode.py --fusion).

Goal: ours/torch <= 0.8 for forward at L >= 512, <= 1.0 everywhere else (PASS/MISS per row).
This is a benchmark, not a test: it exits 0 whatever the ratios are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works without `pip install -e .`

from transformer_min.cli.doctor import doctor_cpu_lines  # noqa: E402
from transformer_min.core.hardware import apply_num_threads  # noqa: E402
from transformer_min.model.attention import MultiHeadAttention  # noqa: E402
from transformer_min.training.trainer import autocast_context  # noqa: E402

CPU = torch.device("cpu")
FUSION_PAYS = 1.10  # issue 14: keep the fused Q/K/V projection only if three projections take > 10% longer
MODES = ("forward", "fwd+bwd")
KERNEL_NAMES = {  # profiler op name -> short label
    "aten::_native_multi_head_attention": "native-mha",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "sdpa-flash",
    "aten::_scaled_dot_product_attention_math": "sdpa-math",
    "aten::_scaled_dot_product_efficient_attention": "sdpa-efficient",
}


class FusedQKVAttention(MultiHeadAttention):
    """Self-attention with Q, K, V from one matmul: [W^Q; W^K; W^V] as one nn.Linear (a real parameter),
    the candidate of issue 14. Same function as `base` (its weights are copied); other calls
    (encoder-decoder attention) go through the three projections."""

    def __init__(self, base: MultiHeadAttention):
        d_model, bias = base.w_q.in_features, base.w_q.bias is not None
        super().__init__(d_model, base.num_heads, base.d_k, base.d_v, base.dropout, bias, base.kernel)
        self.load_state_dict(base.state_dict())
        self.w_qkv = nn.Linear(d_model, base.num_heads * (2 * base.d_k + base.d_v), bias=bias)
        with torch.no_grad():
            self.w_qkv.weight.copy_(torch.cat([base.w_q.weight, base.w_k.weight, base.w_v.weight]))
            if bias:
                self.w_qkv.bias.copy_(torch.cat([base.w_q.bias, base.w_k.bias, base.w_v.bias]))

    def forward(self, query, key, value, mask=None, need_weights=False, cache=None, static_kv=False):
        if static_kv or not (query is key and key is value):
            return super().forward(query, key, value, mask, need_weights, cache, static_kv)
        B, T, _ = query.shape
        offset = 0 if cache is None else cache.length
        hk, hv = self.num_heads * self.d_k, self.num_heads * self.d_v
        q, k, v = self.w_qkv(query).split([hk, hk, hv], dim=-1)  # one matmul: (B, T, H d) each
        q, k, v = self.split_heads(q, self.d_k), self.split_heads(k, self.d_k), self.split_heads(v, self.d_v)
        q, k = self.encode_positions(q, k, offset)
        if cache is not None:
            k, v = cache.append(k, v)
        out, weights = self.attend(q, k, v, mask, need_weights, offset)
        return self.w_o(out.transpose(1, 2).reshape(B, T, hv)), weights


def goal(mode: str, length: int) -> float:
    return 0.8 if mode == "forward" and length >= 512 else 1.0


def build(d_model: int, heads: int, seed: int, kernel: str = "fused",
          fusion: bool = False) -> tuple[MultiHeadAttention, nn.Module]:
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, heads, kernel=kernel)
    if fusion:
        return ours, FusedQKVAttention(ours)
    theirs = nn.MultiheadAttention(d_model, heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)
    return ours, theirs


def forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(module, MultiHeadAttention):
        return module(query=x, key=x, value=x, need_weights=False)[0]
    return module(x, x, x, need_weights=False)[0]


def make_step(module: nn.Module, mode: str, x: torch.Tensor, grad_out: torch.Tensor, precision: str = "fp32"):
    """(reset, run): `run` is one call in `mode`; `reset` (untimed) drops the previous call's gradients."""
    if mode == "forward":
        module.eval()

        def run() -> None:
            with torch.inference_mode(), autocast_context(CPU, precision):
                forward(module, x)

        return (lambda: None), run
    module.train()  # dropout is 0 in both modules; train() keeps torch off its inference fast path
    x = x.detach().requires_grad_(True)

    def reset() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None

    def run() -> None:
        with autocast_context(CPU, precision):
            out = forward(module, x)
        out.backward(grad_out.to(out.dtype))

    return reset, run


def check_same_function(ours, theirs, x) -> float:
    ours.eval()
    theirs.eval()
    with torch.inference_mode():
        return (forward(ours, x) - forward(theirs, x)).abs().max().item()


def time_interleaved(steps: dict, reps: int, warmup: int) -> dict[str, list[float]]:
    """Run the steps alternately (the first one alternates too); seconds per call for each."""
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            reset, run = steps[name]
            reset()
            run()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            reset, run = steps[name]
            reset()
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return times


def profile_call(step) -> tuple[int, list[str]]:
    """Peak torch CPU bytes held during one call (beyond the start) and the attention ops seen."""
    from torch.profiler import ProfilerActivity, profile

    reset, run = step
    reset()  # free the last call's gradients before profiling starts
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = prof.profiler.kineto_results.events()
    deltas = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in deltas:
        live += nbytes
        peak = max(peak, live)
    seen = {e.name() for e in events}
    kernels = sorted({label for name, label in KERNEL_NAMES.items() if name in seen})
    if not kernels and "aten::matmul" in seen:
        kernels = ["matmul"]  # eq. (1) written out (our path under bf16 on the CPU)
    return peak, kernels


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Time our MultiHeadAttention against torch.nn.MultiheadAttention (CPU).")
    p.add_argument("--lengths", type=lambda s: [int(v) for v in s.split(",") if v], default=None,
                   help="comma-separated sequence lengths (default 32,128,512,1024)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per implementation (default 7)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 2)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0 = torch's default, at most the CPUs we may use)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: both modules under CPU bf16 autocast (default fp32)")
    p.add_argument("--modes", default="forward,fwd+bwd", help="comma-separated: forward, fwd+bwd")
    p.add_argument("--no-memory", action="store_true", help="skip the profiler memory pass")
    p.add_argument("--fusion", action="store_true",
                   help="compare three Q/K/V projections (ours) with one fused nn.Linear instead of torch's module")
    p.add_argument("--quick", action="store_true", help="smoke test: lengths 32,128, 3 reps, 1 warmup")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    quick = args.quick
    args.lengths = args.lengths or ([32, 128] if quick else [32, 128, 512, 1024])
    args.reps = args.reps or (3 if quick else 7)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        p.error(f"unknown mode {bad[0]!r}; choose from {', '.join(MODES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    apply_num_threads(args.threads, "--threads")
    kernel = "matmul" if args.precision == "bf16" else "fused"
    ours, theirs = build(args.d_model, args.heads, args.seed, kernel, args.fusion)
    other = "fused" if args.fusion else "torch"
    print(doctor_cpu_lines())
    print(f"torch {torch.__version__}, CPU {'bf16 autocast' if args.precision == 'bf16' else 'float32'}, "
          f"{torch.get_num_threads()} threads; "
          f"B {args.batch}, d_model {args.d_model}, h {args.heads}; self-attention, no mask, need_weights=False; "
          f"ours against {'one fused Q/K/V nn.Linear (--fusion)' if args.fusion else 'torch.nn.MultiheadAttention'}")
    print(f"median of {args.reps} interleaved repetitions after {args.warmup} warm-up; "
          "peak = max torch CPU bytes held during one call beyond the start (torch.profiler memory events)")
    header = (f"{'mode':8s} {'L':>5s} {'ours ms':>10s} {other + ' ms':>10s} {'ours/' + other:>10s} {'goal':>6s} "
              f"{'':4s} {'ours peak MiB':>13s} {other + ' peak MiB':>14s}  kernels (ours | {other})")
    print(header)
    print("-" * len(header))
    misses = 0
    for mode in args.modes:
        for length in args.lengths:
            g = torch.Generator().manual_seed(args.seed + length)
            x = torch.randn(args.batch, length, args.d_model, generator=g)
            grad_out = torch.randn(args.batch, length, args.d_model, generator=g)
            diff = check_same_function(ours, theirs, x)
            if diff > 1e-3:
                print(f"error: the two modules disagree by {diff:.3g} at L {length}; not timing", file=sys.stderr)
                return 1
            steps = {name: make_step(module, mode, x, grad_out, args.precision)
                     for name, module in (("ours", ours), ("torch", theirs))}
            times = time_interleaved(steps, args.reps, args.warmup)
            ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
            ratio = ms["ours"] / ms["torch"]
            target = FUSION_PAYS if args.fusion else goal(mode, length)
            if args.fusion:  # the fusion pays where three projections take > 10% longer
                verdict = "PAYS" if ratio > target else "-"
                misses += verdict != "PAYS"
            else:
                verdict = "PASS" if ratio <= target else "MISS"
                misses += verdict == "MISS"
            if args.no_memory:
                mem, kernels = "-", "-"
                mem_t = "-"
            else:
                (peak_o, k_o), (peak_t, k_t) = profile_call(steps["ours"]), profile_call(steps["torch"])
                mem, mem_t = f"{peak_o / 2**20:.1f}", f"{peak_t / 2**20:.1f}"
                kernels = f"{','.join(k_o) or '?'} | {','.join(k_t) or '?'}"
            bound = ('>' if args.fusion else '<=') + format(target, '.1f')
            print(f"{mode:8s} {length:5d} {ms['ours']:10.2f} {ms['torch']:10.2f} {ratio:10.2f} "
                  f"{bound:>6s} {verdict:4s} {mem:>13s} {mem_t:>14s}  {kernels}", flush=True)
    if args.fusion:
        print(f"\nthe fusion does not pay (ours/fused <= {FUSION_PAYS}) in {misses} of "
              f"{len(args.modes) * len(args.lengths)} rows; timings on a shared machine are noisy.")
    else:
        print(f"\n{misses} of {len(args.modes) * len(args.lengths)} rows miss the goal "
              "(ours/torch <= 0.8 forward at L >= 512, <= 1.0 elsewhere); timings on a shared machine are noisy.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
