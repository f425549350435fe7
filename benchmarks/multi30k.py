"""Multi30k end to end, from a fresh run directory: prepare, train within the time budget, average
the last 5 checkpoints, evaluate on the test set with beam 4 (section 6.1).

    python benchmarks/multi30k.py                               # both directions, 45-minute budgets
    python benchmarks/multi30k.py --directions de_en --budget 25
    python benchmarks/multi30k.py --summarize runs/multi30k_de_en   # print the summary of a finished run

Prints wall time, training tokens/s, the validation curve (loss and greedy BLEU per epoch) and test
BLEU/chrF (last, best and averaged checkpoints) for each direction. Record its output in
docs/results.md with the command, the config, the machine and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TMIN = [sys.executable, "-m", "transformer_min"]


def sh(args: list[str]) -> str:
    print("$ tmin " + " ".join(args[3:]), flush=True)
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"failed: {' '.join(args)}")
    return proc.stdout


def summarize(run_dir: Path) -> dict:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "eval_val_bleu" in r]
    tok = sum(r["tokens"] for r in steps)
    secs = steps[-1]["train_seconds"] if steps else 0.0
    print(f"\n{run_dir.name}: {len(steps)} steps, {secs / 60:.1f} min of training, "
          f"{tok / max(secs, 1e-9):.0f} target tokens/s")
    print(f"{'step':>6s} {'train min':>9s} {'val nll':>8s} {'val BLEU (greedy)':>18s}")
    for r in evals:
        print(f"{r['step']:6d} {r['train_seconds'] / 60:9.1f} {r['eval_val_nll']:8.3f} {r['eval_val_bleu']:18.2f}")
    return {"steps": len(steps), "train_minutes": secs / 60, "tokens_per_s": tok / max(secs, 1e-9),
            "val": [(r["step"], r["eval_val_nll"], r["eval_val_bleu"]) for r in evals]}


def evaluate(config: str, ckpt: Path, split: str) -> dict:
    sh(TMIN + ["eval", "--config", config, "--checkpoint", str(ckpt), "--split", split])
    hyp = next(ckpt.parent.parent.glob(f"hyp.{split}.{ckpt.stem}.*.json"))
    return json.loads(hyp.read_text())


def run_direction(direction: str, budget: float, split: str) -> dict:
    config = f"configs/multi30k_{direction}.toml"
    name = f"multi30k_{direction}_{time.strftime('%Y%m%d_%H%M')}"
    t0 = time.perf_counter()
    sh(TMIN + ["data", "prepare", "--config", config])
    sh(TMIN + ["train", "--config", config, "--name", name, "--time-budget", str(budget)])
    run_dir = ROOT / "runs" / name
    sh(TMIN + ["average", str(run_dir), "--last", "5"])
    results = {"summary": summarize(run_dir)}
    for label, ck in (("last", None), ("best", run_dir / "checkpoints" / "best.pt"),
                      ("averaged", run_dir / "checkpoints" / "averaged.pt")):
        if ck is None:
            from_dir = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
            ck = from_dir
        results[label] = evaluate(config, ck, split)
    results["wall_minutes"] = (time.perf_counter() - t0) / 60
    print(f"\n{direction} {split}: " + ", ".join(
        f"{k} BLEU {results[k]['bleu']:.2f} chrF {results[k]['chrf']:.2f}" for k in ("last", "best", "averaged"))
          + f"; wall {results['wall_minutes']:.1f} min")
    print(f"  {results['averaged']['bleu_signature']}")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--directions", default="de_en,en_de")
    ap.add_argument("--budget", type=float, default=45.0, help="training minutes per direction")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--summarize", metavar="RUN_DIR", help="only print the summary of a finished run")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    if a.summarize:
        summarize(Path(a.summarize))
        return 0
    print(f"Multi30k benchmark, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, budget {a.budget} min")
    out = {d: run_direction(d, a.budget, a.split) for d in a.directions.split(",")}
    path = ROOT / "runs" / f"multi30k_results_{time.strftime('%Y%m%d_%H%M')}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
