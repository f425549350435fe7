"""The GPU benchmark in one short run (benchmarks/gpu.sh calls this).

    bash benchmarks/gpu.sh --out runs/gpu          # one CUDA GPU, within 8 minutes
    bash benchmarks/gpu.sh --dry-run --out /tmp/g  # the same code path on CPU at tiny sizes (CI)

1. Checks the CUDA path: a few bf16 training steps, cached decoding == uncached, and a 2-process
   DDP step (torchrun, nccl) when 2 GPUs are present.
2. Measures: training tokens/s and achieved TFLOP/s of the base configuration (d_model 512, 6+6) in
   bf16 at about 25,000 source + 25,000 target tokens per batch (section 5.1), as a fraction of the
   bf16 matmul ceiling measured here; the same step for torch.nn.Transformer, for a ratio; beam-4
   decoding sentences/s on the Multi30k test set; minutes per Multi30k epoch.
Writes results.json (and gpu.sh the log) under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import Stepper, build_pair, count_step_flops, matmul_ceiling, synthetic_batch, time_interleaved

ROOT = Path(__file__).resolve().parents[1]


def check_cuda_path(device: str, dry: bool) -> dict:
    """bf16 training steps, cached == uncached decoding, DDP when 2 GPUs."""
    from transformer_min.decoding.search import TransformerStepper, greedy_search, max_output_lengths
    from transformer_min.model.transformer import Transformer

    out = {}
    models = build_pair(50, 32, 4, 64, 2, dropout=0.0)
    step = Stepper(models["ours"], device, "bf16")
    batch = synthetic_batch(50, 16, 10, 10).to(device)
    losses = [step(batch) for _ in range(8)]
    out["bf16_steps"] = {"losses": [round(x, 4) for x in losses],
                         "ok": all(map(lambda x: x == x and abs(x) < 1e9, losses)) and losses[-1] < losses[0]}
    torch.manual_seed(0)
    m = Transformer(50, 50, 32, 4, 64, 2, 0.0, max_len=128).to(device).eval()
    src = torch.randint(3, 50, (4, 9), device=device)
    lim = max_output_lengths(src, 0, 12)
    with torch.no_grad():
        a, la = greedy_search(TransformerStepper(m, src, 0, use_cache=True), 4, 1, 2, 0, lim, True)
        b, lb = greedy_search(TransformerStepper(m, src, 0, use_cache=False), 4, 1, 2, 0, lim, True)
    diff = max((x - y).abs().max().item() for x, y in zip(la, lb))
    out["cached_decoding"] = {"same_tokens": bool(torch.equal(a, b)), "max_logprob_diff": diff,
                              "ok": bool(torch.equal(a, b)) and diff < 1e-4}
    if not dry and torch.cuda.device_count() >= 2:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               "-m", "transformer_min", "train", "--task", "copy", "--steps", "5", "--device", "cuda",
                               "--name", "gpu_ddp", "--out-dir", "/tmp/gpu_ddp", "--overwrite"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        out["ddp_2gpu"] = {"ok": proc.returncode == 0, "tail": proc.stderr[-500:]}
    else:
        out["ddp_2gpu"] = {"ok": None, "note": "skipped: fewer than 2 GPUs" if not dry else "skipped: dry run"}
    return out


def measure_base(device: str, dry: bool, reps: int) -> dict:
    """The base configuration in bf16 at ~25k + 25k tokens: ours vs nn.Transformer."""
    if dry:
        d, h, ff, n, vocab, batch, length = 32, 4, 64, 1, 100, 8, 12
    else:
        d, h, ff, n, vocab, batch, length = 512, 8, 2048, 6, 37000, 1000, 25  # 25,000 + 25,000 tokens
    b = synthetic_batch(vocab, batch, length, length).to(device)
    models = build_pair(vocab, d, h, ff, n, max_len=64)
    flops = {k: count_step_flops(m.to(device), b) for k, m in models.items()}
    steppers = {k: Stepper(m, device, "bf16") for k, m in models.items()}
    secs = time_interleaved(steppers, b, reps, warmup=2, device=device)
    ceiling = matmul_ceiling(device, torch.bfloat16 if device != "cpu" else torch.float32,
                             n=8192 if not dry else 256)
    ntok = int((b.tgt_out != 0).sum())
    rows = {k: {"s_per_step": secs[k], "tgt_tokens_per_s": ntok / secs[k], "tflops": flops[k] / secs[k] / 1e12,
                "fraction_of_ceiling": flops[k] / secs[k] / ceiling} for k in models}
    return {"config": dict(d_model=d, heads=h, d_ff=ff, layers=n, vocab=vocab, batch=batch, length=length),
            "ceiling_tflops": ceiling / 1e12, "models": rows,
            "ratio_tokens_per_s": secs["nn.Transformer"] / secs["ours"]}


def measure_multi30k(device: str, dry: bool, config: str, checkpoint: str | None) -> dict:
    """Beam-4 sentences/s on the Multi30k test set, and minutes per training epoch."""
    import dataclasses

    from transformer_min.core.project import load_project
    from transformer_min.data.batching import TokenBatcher
    from transformer_min.data.pipeline import prepare
    from transformer_min.translation.translate import translate_ids
    from transformer_min.model.transformer import build_model
    from transformer_min.model.saved import load_model

    try:
        cfg = load_project(config, quiet=True).config
        prepared = prepare(cfg)
    except Exception as e:  # noqa: BLE001 - no data on this machine
        return {"skipped": f"no Multi30k data: {e}"}
    if checkpoint:
        model, cfg = load_model(checkpoint, device)
        note = f"trained checkpoint {checkpoint}"
    else:
        torch.manual_seed(0)
        model = build_model(cfg).to(device).eval()
        note = "untrained model (decodes to the maximum length: a lower bound); pass --checkpoint"
    test = [s for s, _ in prepared.splits[cfg.data.test_split]][: 20 if dry else None]
    max_off = 5 if dry else cfg.decode.max_len_offset
    t0 = time.perf_counter()
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=device != "cpu"):
        translate_ids(model, test, cfg.decode.beam_size, cfg.decode.length_penalty, max_off, device,
                      batch_size=200 if not dry else 20)
    torch.cuda.synchronize() if device != "cpu" else None
    decode_s = time.perf_counter() - t0
    tcfg = dataclasses.replace(cfg.train, precision="bf16" if device != "cpu" else "fp32")
    batcher = TokenBatcher(prepared.splits[cfg.data.train_split], tcfg.batch_tokens, 0, 1, 2, 0)
    torch.manual_seed(0)
    step = Stepper(build_model(cfg), device, tcfg.precision)
    steps = 3 if dry else 30
    batches = [batcher.next_batch().to(device) for _ in range(steps + 2)]
    for b in batches[:2]:
        step(b)
    torch.cuda.synchronize() if device != "cpu" else None
    t0 = time.perf_counter()
    for b in batches[2:]:
        step(b)
    torch.cuda.synchronize() if device != "cpu" else None
    per_step = (time.perf_counter() - t0) / steps
    return {"beam": cfg.decode.beam_size, "sentences": len(test), "decode_seconds": decode_s,
            "sentences_per_s": len(test) / decode_s, "decode_model": note,
            "epoch_batches": len(batcher), "s_per_step": per_step, "epoch_minutes": per_step * len(batcher) / 60}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu_bench")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: checks the script itself")
    ap.add_argument("--config", default="configs/multi30k_de_en.toml")
    ap.add_argument("--checkpoint", help="a trained Multi30k checkpoint for the decoding speed")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    if not a.dry_run and not torch.cuda.is_available():
        print("error: no CUDA GPU here; use --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    device = "cpu" if a.dry_run else "cuda"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU (dry run)"
    print(f"== GPU benchmark: {name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')} ==")
    t0 = time.perf_counter()
    results = {"device": name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "dry_run": a.dry_run}
    results["checks"] = check_cuda_path(device, a.dry_run)
    for k, v in results["checks"].items():
        print(f"check {k:16s} {'PASS' if v['ok'] else ('skip' if v['ok'] is None else 'FAIL')}  "
              f"{ {x: y for x, y in v.items() if x not in ('ok', 'tail')} }")
    results["base"] = measure_base(device, a.dry_run, 2 if a.dry_run else a.reps)
    base = results["base"]
    print(f"\nbase config {base['config']}, bf16; matmul ceiling {base['ceiling_tflops']:.1f} TFLOP/s")
    print(f"{'model':16s} {'s/step':>8s} {'tgt tok/s':>10s} {'TFLOP/s':>8s} {'of ceiling':>10s}")
    for k, r in base["models"].items():
        print(f"{k:16s} {r['s_per_step']:8.3f} {r['tgt_tokens_per_s']:10.0f} {r['tflops']:8.2f} "
              f"{100 * r['fraction_of_ceiling']:9.1f}%")
    print(f"ours/nn.Transformer tokens/s: {base['ratio_tokens_per_s']:.2f}")
    results["multi30k"] = measure_multi30k(device, a.dry_run, a.config, a.checkpoint)
    m = results["multi30k"]
    if "skipped" in m:
        print(f"\nMulti30k: {m['skipped']}")
    else:
        print(f"\nMulti30k beam-{m['beam']} decoding: {m['sentences_per_s']:.1f} sentences/s "
              f"({m['sentences']} sentences; {m['decode_model']})")
        print(f"Multi30k epoch: {m['epoch_minutes']:.2f} min ({m['epoch_batches']} batches x {m['s_per_step']:.3f} s)")
    results["seconds"] = time.perf_counter() - t0
    out = Path(a.out)
    from transformer_min.core.io import atomic_write_text

    atomic_write_text(out / "results.json", json.dumps(results, indent=2, default=str))
    print(f"\ntotal {results['seconds']:.0f} s; results in {out / 'results.json'}")
    failed = [k for k, v in results["checks"].items() if v["ok"] is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
