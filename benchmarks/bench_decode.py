"""Benchmark: incremental decoding with a key/value cache against re-running the decoder on the
whole prefix every step, measured in the same run.

    python benchmarks/bench_decode.py            # base-width model (d_model 512, 6+6 layers), batch 8, 64 tokens
    python benchmarks/bench_decode.py --quick    # CI smoke test: tiny model, few tokens

Both paths decode exactly `--tokens` output tokens (EOS is suppressed so no sentence stops early)
for a batch of `--batch` sources, greedy, and must produce identical tokens (checked). Repetitions
alternate which path runs first; the table shows medians and the speedup (uncached / cached time).
Goal (issue 5): speedup >= 5x at 64 tokens, batch 8. A benchmark, not a test: it exits 0.

    python benchmarks/bench_decode.py --fusion   # issue 14: cached decoding, three Q/K/V projections
                                                 # against one fused nn.Linear (bench_attention.FusedQKVAttention)

--fusion times the cached path twice in the same run, interleaved: the model as built (three
projections) and a copy whose self-attentions compute Q, K, V with one matmul; outputs must agree.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works without `pip install -e .`

from transformer_min.cli.doctor import doctor_cpu_lines  # noqa: E402
from transformer_min.core.hardware import apply_num_threads  # noqa: E402
from transformer_min.decoding.search import greedy_search  # noqa: E402
from transformer_min.decoding.stepper import TransformerStepper  # noqa: E402
from transformer_min.model.transformer import Transformer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import FUSION_PAYS, FusedQKVAttention  # noqa: E402

PAD, BOS, EOS = 0, 1, 2


class NoEOS:
    """Wraps a stepper so that EOS is never chosen: every sentence runs the full length."""

    def __init__(self, inner):
        self.inner = inner

    def step(self, prefix):
        logp = self.inner.step(prefix)
        logp[:, EOS] = float("-inf")
        return logp

    def reorder(self, index):
        self.inner.reorder(index)


@torch.inference_mode()
def decode(model, src, tokens: int, use_cache: bool) -> tuple[torch.Tensor, float]:
    t0 = time.perf_counter()
    stepper = NoEOS(TransformerStepper(model, src, PAD, use_cache=use_cache))
    out = greedy_search(stepper, src.size(0), BOS, EOS, PAD, torch.full((src.size(0),), tokens))
    return out, time.perf_counter() - t0


def fused_copy(model):
    """A copy of `model` whose encoder and decoder self-attentions use one fused Q/K/V matmul."""
    fused = copy.deepcopy(model)
    for layer in (*fused.encoder.layers, *fused.decoder.layers):
        layer.self_attn = FusedQKVAttention(layer.self_attn).eval()
    return fused


def compare_fusion(model, src, a) -> int:
    """Cached greedy decoding, three projections against one fused matmul, interleaved; medians."""
    fused = fused_copy(model)
    models = {"three projections": model, "fused Q/K/V": fused}
    outs = {name: decode(m, src, a.tokens, True)[0] for name, m in models.items()}  # warm-up
    same = torch.equal(*outs.values())
    times = {name: [] for name in models}
    for r in range(a.reps):
        for name in (list(models) if r % 2 == 0 else list(models)[::-1]):
            times[name].append(decode(models[name], src, a.tokens, True)[1])
    med = {k: statistics.median(v) for k, v in times.items()}
    n = a.batch * a.tokens
    print(f"cached decoding of {a.tokens} tokens, batch {a.batch}, d_model {a.d_model}, {a.layers}+{a.layers} "
          f"layers, vocab {a.vocab}, {torch.get_num_threads()} threads, median of {a.reps}")
    print(f"{'self-attention Q/K/V':28s} {'seconds':>9s} {'tokens/s':>10s}")
    for name, t in med.items():
        print(f"{name:28s} {t:9.3f} {n / t:10.1f}")
    ratio = med["three projections"] / med["fused Q/K/V"]
    print(f"three / fused: {ratio:.3f} (the fusion pays if > {FUSION_PAYS}); identical outputs: {same}")
    return 0 if same else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--src-len", type=int, default=20)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0 = torch's default, at most the CPUs we may use)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test")
    p.add_argument("--fusion", action="store_true", help="cached path only: three Q/K/V projections against one")
    a = p.parse_args(argv)
    if a.quick:
        a.d_model, a.layers, a.heads, a.vocab, a.tokens, a.reps = 32, 2, 4, 50, 8, 2
    apply_num_threads(a.threads, "--threads")
    print(doctor_cpu_lines())
    torch.manual_seed(0)
    model = Transformer(a.vocab, a.vocab, d_model=a.d_model, num_heads=a.heads, d_ff=4 * a.d_model,
                        num_layers=a.layers, dropout=0.0, max_len=a.src_len + a.tokens + 8).eval()
    src = torch.randint(3, a.vocab, (a.batch, a.src_len), generator=torch.Generator().manual_seed(1))
    if a.fusion:
        return compare_fusion(model, src, a)
    cached_out, _ = decode(model, src, a.tokens, True)  # warm-up, and the outputs must agree
    full_out, _ = decode(model, src, a.tokens, False)
    same = torch.equal(cached_out, full_out)
    times = {True: [], False: []}
    for r in range(a.reps):
        for use_cache in ((True, False) if r % 2 == 0 else (False, True)):
            times[use_cache].append(decode(model, src, a.tokens, use_cache)[1])
    n = a.batch * a.tokens
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"decoding {a.tokens} tokens, batch {a.batch}, d_model {a.d_model}, {a.layers}+{a.layers} layers, "
          f"vocab {a.vocab}, {torch.get_num_threads()} threads, median of {a.reps}")
    print(f"{'path':28s} {'seconds':>9s} {'tokens/s':>10s}")
    print(f"{'KV cache (incremental)':28s} {med[True]:9.3f} {n / med[True]:10.1f}")
    print(f"{'full prefix every step':28s} {med[False]:9.3f} {n / med[False]:10.1f}")
    speedup = med[False] / med[True]
    print(f"speedup (uncached / cached): {speedup:.2f}x  goal >= 5x: {'PASS' if speedup >= 5 else 'MISS'}")
    print(f"identical outputs: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
