"""Multi30k end to end, from a fresh run directory: prepare, train within a budget of updates or
minutes, average the last 5 checkpoints, evaluate on the test set with beam 4 (section 6.1).

    python benchmarks/multi30k.py --steps 1456,2676             # both directions, scored at 1,456 and 2,676 updates
    python benchmarks/multi30k.py                               # both directions, 45 min, scored at 25 and 45
    python benchmarks/multi30k.py --directions de_en --budget 25 --snapshot 0
    python benchmarks/multi30k.py --summarize runs/multi30k_de_en   # print the summary of a finished run

An update budget gives the same model on every machine (the eq. (3) schedule depends on neither
budget); a minute budget buys a different number of updates on each CPU. Prints, per scored run: updates,
target tokens per update, tokens/s, the precision actually used, torch's threads, the CPU model and
capability, the validation curve (loss and greedy BLEU per epoch) and test BLEU/chrF (last, best and
averaged checkpoints). Record its output in docs/results.md with the command, the config and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
    starts = [r for r in recs if r.get("event") == "start"]  # one per training segment (resumes)
    tok = sum(r["tokens"] for r in steps)
    secs = steps[-1]["train_seconds"] if steps else 0.0
    machine = {k: sorted({str(r.get(k)) for r in starts})
               for k in ("precision", "threads", "device", "cpu", "cpu_capability")}
    print(f"\n{run_dir.name}: {len(steps)} updates, {tok / max(len(steps), 1):.0f} target tokens per update, "
          f"{secs / 60:.1f} min of training, {tok / max(secs, 1e-9):.0f} target tokens/s")
    print("  ran on: " + "; ".join(f"{k} {' / '.join(v)}" for k, v in machine.items() if v))
    print(f"{'step':>6s} {'train min':>9s} {'val nll':>8s} {'val BLEU (greedy)':>18s}")
    for r in evals:
        print(f"{r['step']:6d} {r['train_seconds'] / 60:9.1f} {r['eval_val_nll']:8.3f} {r['eval_val_bleu']:18.2f}")
    return {"steps": len(steps), "train_minutes": secs / 60, "tokens_per_s": tok / max(secs, 1e-9),
            "tokens_per_update": tok / max(len(steps), 1), "machine": machine,
            "val": [(r["step"], r["eval_val_nll"], r["eval_val_bleu"]) for r in evals]}


def evaluate(config: str, ckpt: Path, split: str, extra: tuple[str, ...] = (), tag: str = "") -> dict:
    hyp_out = ckpt.parent.parent / f"hyp.{split}.{ckpt.stem}{tag}.txt"
    sh(TMIN + ["eval", "--config", config, "--checkpoint", str(ckpt), "--split", split,
               "--hyp-out", str(hyp_out), *extra])
    return json.loads(Path(f"{hyp_out}.json").read_text())


def evaluate_run(config: str, run_dir: Path, split: str, alphas: str, alpha_step: float = 0.4) -> dict:
    """Average the last 5 checkpoints (section 6.1), then score last / best / averaged on `split` with the
    config's beam and alpha, and the averaged checkpoint once more with the alpha chosen on val."""
    sh(TMIN + ["average", str(run_dir), "--last", "5"])
    ckpts = run_dir / "checkpoints"
    results = {"summary": summarize(run_dir)}
    for label, ck in (("last", sorted(ckpts.glob("step_*.pt"))[-1]), ("best", ckpts / "best.pt"),
                      ("averaged", ckpts / "averaged.safetensors")):
        results[label] = evaluate(config, ck, split)
    if alphas.strip():
        tuned = evaluate(config, ckpts / "averaged.safetensors", split, tag=".tuned",
                         extra=("--tune-alpha", "--alpha-grid", alphas, "--alpha-step", str(alpha_step)))
        results["val_alpha"] = {"val_bleu": tuned["tuned_alpha"]["bleu"], "chosen": tuned["alpha"], "test": tuned}
    return results


def report(direction: str, label: str, split: str, results: dict) -> None:
    line = ", ".join(f"{k} BLEU {results[k]['bleu']:.2f} chrF {results[k]['chrf']:.2f}"
                     for k in ("last", "best", "averaged"))
    print(f"\n{direction} {label} {split}: {line}")
    if "val_alpha" in results:
        va = results["val_alpha"]
        sweep = ", ".join(f"{a} -> {b:.2f}" for a, b in va["val_bleu"].items())  # tmin eval --tune-alpha
        print(f"  alpha on val (averaged): {sweep}; chosen {va['chosen']}: test BLEU {va['test']['bleu']:.2f} "
              f"chrF {va['test']['chrf']:.2f}")
    print(f"  {results['averaged']['bleu_signature']}")


def run_direction(direction: str, config: str, runs: Path, budgets: list[str], split: str,
                  alphas: str, alpha_step: float = 0.4) -> dict:
    """prepare -> train to the first budget -> copy and score that run -> resume to the next budget ->
    score, and so on. A budget is "<n>steps" (updates) or "<m>min" (training minutes). The eq. (3)
    schedule depends on neither, so each copy is exactly what a run with that budget gives."""
    name = f"multi30k_{direction}_{time.strftime('%Y%m%d_%H%M%S')}"  # two runs started in one minute differ
    run_dir = runs / name
    t0 = time.perf_counter()
    out = {}
    sh(TMIN + ["data", "prepare", "--config", config])
    for i, budget in enumerate(budgets):
        value = budget.removesuffix("steps").removesuffix("min")
        limit = (["--steps", value, "--time-budget", "0"] if budget.endswith("steps")
                 else ["--time-budget", value])
        first, last = i == 0, i == len(budgets) - 1
        sh(TMIN + (["train", "--config", config, "--name", name] if first else ["train", "--resume", str(run_dir)])
           + limit)
        scored = run_dir if last else run_dir.with_name(f"{name}_{budget}")
        if not last:
            shutil.copytree(run_dir, scored)
        out[budget] = evaluate_run(config, scored, split, alphas, alpha_step)
        report(direction, budget, split, out[budget])
    out["wall_minutes"] = (time.perf_counter() - t0) / 60
    print(f"  {direction} wall time (prepare, train, validation, evaluation): {out['wall_minutes']:.1f} min")
    return out


def budget_list(steps: str | None, budget: float, snapshot: float) -> list[str]:
    """--steps 1456,2676 -> ["1456steps", "2676steps"]; else minutes: [snapshot, budget]."""
    if steps:
        counts = sorted({int(x) for x in steps.split(",") if x.strip()})
        if not counts or counts[0] <= 0:
            raise SystemExit(f"--steps {steps!r}: give positive update counts, e.g. --steps 1456,2676")
        return [f"{n}steps" for n in counts]
    return ([f"{snapshot:g}min"] if snapshot and snapshot < budget else []) + [f"{budget:g}min"]


def run_dir_root(config: str) -> Path:
    from transformer_min.core.project import load_project

    return ROOT / load_project(config, quiet=True).config.train.out_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--directions", default="de_en,en_de")
    ap.add_argument("--config", default="configs/multi30k_{direction}.toml",
                    help="config file; {direction} is replaced by each direction")
    ap.add_argument("--steps", metavar="N[,N...]",
                    help="update budgets, e.g. 1456,2676: score at each (instead of --budget/--snapshot)")
    ap.add_argument("--budget", type=float, default=45.0, help="training minutes per direction")
    ap.add_argument("--snapshot", type=float, default=25.0,
                    help="also score the run at this many training minutes (0: off)")
    ap.add_argument("--alphas", default="0.6,1.0,1.4",
                    help="length penalties to try on val for the averaged checkpoint ('' to skip)")
    ap.add_argument("--alpha-step", type=float, default=0.4,
                    help="while the largest alpha wins on val, try one more this much larger (0: off)")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--summarize", metavar="RUN_DIR", help="only print the summary of a finished run")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "src"))
    from transformer_min.core.io import atomic_write_text

    if a.summarize:
        summarize(Path(a.summarize))
        return 0
    from transformer_min.core.hardware import cpu_info

    budgets = budget_list(a.steps, a.budget, a.snapshot)
    info = cpu_info()
    print(f"Multi30k benchmark, {time.strftime('%Y-%m-%d %H:%M')}, {info.model} ({info.flags}), "
          f"{info.cores} CPUs, torch {info.torch_threads} threads; budgets {', '.join(budgets)}", flush=True)
    out, stamp = {}, time.strftime('%Y%m%d_%H%M%S')
    for d in a.directions.split(","):
        config = a.config.format(direction=d)
        runs = run_dir_root(config)
        out[d] = run_direction(d, config, runs, budgets, a.split, a.alphas, a.alpha_step)
        path = runs / f"multi30k_results_{stamp}.json"
        atomic_write_text(path, json.dumps(out, indent=2, default=str))
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
