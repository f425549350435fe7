"""Benchmark: one training step (forward, backward, fused Adam) of our model against the same
configuration built from torch.nn.Transformer, in the same run, with achieved FLOP/s as a fraction
of this machine's matmul ceiling (a large torch.mm, measured here too).

    python benchmarks/bench_train_step.py                # d_model 256 (3+3) and 512 (6+6), CPU fp32
    python benchmarks/bench_train_step.py --quick        # CI smoke test: tiny sizes
    python benchmarks/bench_train_step.py --precision auto   # bf16 only where the hardware has it natively

Batches: real Multi30k token batches when --config points at prepared-able data (their padding
fraction is printed), else a synthetic batch of --batch-tokens target tokens. Goal (issue 6):
ours/nn.Transformer >= 1.3 in tokens/s and >= 70% of the ceiling at d_model 512 (issue 37; it was 1.0
and 65% in issue 6). Exits 0 whatever the numbers are.

Each model trains as its users would: ours through `tmin train`'s path (train.loss_kernel = "fused": the
generator and the label-smoothed loss in one pass, model/generator_loss.py), nn.Transformer with torch's own
F.cross_entropy(label_smoothing=0.1), the fastest stock loss. --paper-loss adds a row of ours through the
paper's loss path (logits, then training.loss.label_smoothed_nll), to show what the fused loss buys.
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch

from common import Stepper, build_pair, count_step_flops, matmul_ceiling, synthetic_batch, time_interleaved

from transformer_min.cli.doctor import doctor_cpu_lines  # noqa: E402
from transformer_min.core.hardware import precision_for  # noqa: E402

SIZES = {256: dict(heads=4, d_ff=1024, layers=3), 512: dict(heads=8, d_ff=2048, layers=6)}


def real_batch(config: str, batch_tokens: int):
    """A typical token batch of the prepared Multi30k data, and the padding fraction of an epoch."""
    from transformer_min.core.project import load_project
    from transformer_min.data.batching import TokenBatcher
    from transformer_min.data.pipeline import prepare

    cfg = load_project(config, quiet=True).config
    p = prepare(cfg)
    batcher = TokenBatcher(p.splits[cfg.data.train_split], batch_tokens, 0, 1, 2, 0)
    batches = [batcher.next_batch() for _ in range(len(batcher))]
    batches.sort(key=lambda b: b.tgt_out.numel())
    return batches[len(batches) // 2], batcher.padding_fraction(1), batcher.padding_fraction(0), len(p.tokenizer)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-models", default="256,512")
    ap.add_argument("--config", default="configs/multi30k_de_en.toml", help="data for real batches")
    ap.add_argument("--batch-tokens", type=int, default=4000)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="fp32",
                    help="auto: bf16 where the CPU/GPU has native bf16, else fp32 (tmin doctor)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--paper-loss", action="store_true",
                    help="also time ours through the paper's loss path (logits, then label_smoothed_nll)")
    a = ap.parse_args(argv)
    d_models = [int(x) for x in a.d_models.split(",")]
    if a.quick:
        SIZES[32] = dict(heads=4, d_ff=64, layers=1)
        d_models, a.reps, a.batch_tokens = [32], 2, 200
    vocab = 8000
    batch, pad_tgt, pad_src = None, None, None
    if not a.quick:
        try:
            batch, pad_tgt, pad_src, vocab = real_batch(a.config, a.batch_tokens)
        except Exception as e:  # noqa: BLE001 - no data here: synthetic batches instead
            print(f"(no real batches: {e}; using a synthetic batch)")
    if batch is None:
        batch = synthetic_batch(vocab if not a.quick else 50, max(1, a.batch_tokens // 20), 20, 20)
        vocab = vocab if not a.quick else 50
    batch = batch.to(a.device)
    a.precision = precision_for(a.precision, a.device)  # warns on bf16 without native support
    ceiling = matmul_ceiling(a.device, torch.bfloat16 if a.precision == "bf16" else torch.float32,
                             n=256 if a.quick else 2048)
    ntok = int((batch.tgt_out != 0).sum())
    print(doctor_cpu_lines())
    print(f"device {a.device}, {torch.get_num_threads()} threads, {a.precision}; matmul ceiling "
          f"{ceiling / 1e9:.1f} GFLOP/s; batch {tuple(batch.src.shape)} src / {tuple(batch.tgt_in.shape)} tgt, "
          f"{ntok} target tokens")
    if pad_tgt is not None:
        print(f"padding in Multi30k token batches: target {100 * pad_tgt:.1f}%, source {100 * pad_src:.1f}%")
    print(f"{'d_model':>7s} {'model':16s} {'s/step':>8s} {'tgt tok/s':>10s} {'GFLOP/s':>9s} {'of ceiling':>10s}")
    for d in d_models:
        s = SIZES[d]
        models = build_pair(vocab, d, s["heads"], s["d_ff"], s["layers"])
        if a.paper_loss:  # the same weights again, through the paper's loss path (train.loss_kernel = "paper")
            models = {"ours": models["ours"], "ours, paper loss": copy.deepcopy(models["ours"]),
                      "nn.Transformer": models["nn.Transformer"]}
        # FLOPs of the model (the paper path's count, pad rows included, for every row): a rate, not a cost
        flops = {k: count_step_flops(m.to(a.device), batch) for k, m in models.items()}
        losses = {"ours": "fused", "ours, paper loss": "paper", "nn.Transformer": "torch"}
        steppers = {k: Stepper(m, a.device, a.precision, losses[k]) for k, m in models.items()}
        secs = time_interleaved(steppers, batch, a.reps, warmup=1, device=a.device)
        for k in models:
            rate = flops[k] / secs[k]
            print(f"{d:7d} {k:16s} {secs[k]:8.4f} {ntok / secs[k]:10.0f} {rate / 1e9:9.1f} "
                  f"{100 * rate / ceiling:9.1f}%")
        ratio = secs["nn.Transformer"] / secs["ours"]
        frac = flops["ours"] / secs["ours"] / ceiling
        goal = f"goal: ratio >= 1.3{' and >= 70% of ceiling' if d == 512 else ''}"
        ok = ratio >= 1.3 and (d != 512 or frac >= 0.70)
        print(f"{d:7d} ours/nn.Transformer tokens/s ratio {ratio:.2f}  ({goal}: {'PASS' if ok else 'MISS'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
