"""Table 3 row (E), extended: sinusoidal, learned, rotary and relative positions at one update budget.
(Every row of Table 3, (A)-(E) and big, with the paper's protocol: benchmarks/table3.py.)

    python benchmarks/table3_row_e.py reverse                     # 4 variants x seeds 1,2,3, 200 updates each
    python benchmarks/table3_row_e.py multi30k --seeds 1          # Multi30k De->En, 1,456 updates each
    python benchmarks/table3_row_e.py multi30k --variants rope,relative --seeds 2
    python benchmarks/table3_row_e.py table runs/row_e_*.json     # one table from earlier result files

Each run is a plain `tmin train` of a config derived from configs/reverse.toml or configs/multi30k_de_en.toml
with only `model.positional`, `train.seed` (and the budget) changed, so the variants differ in nothing else.
Reverse: exact-match accuracy of greedy decoding on 1,000 fresh sequences (the trainer's final evaluation) and
the teacher-forced NLL per target token on those sequences. Multi30k: the val NLL at the last update and
test_2016_flickr BLEU of the average of the last 5 checkpoints (beam 4, alpha 0.6) through
benchmarks/multi30k.py. The table gives, per variant, the mean and the spread (max - min) over seeds; a
difference between two variants smaller than the larger of their spreads is called run-to-run noise.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TMIN = [sys.executable, "-m", "transformer_min"]
VARIANTS = ("sinusoidal", "learned", "rope", "relative")
BASE = {"reverse": "configs/reverse.toml", "multi30k": "configs/multi30k_de_en.toml"}


def derive_config(task: str, variant: str, seed: int, steps: int, batch_tokens: int | None, out: Path) -> Path:
    """The base config with model.positional, train.seed, train.steps (and train.batch_tokens) replaced."""
    text = (ROOT / BASE[task]).read_text(encoding="utf-8")
    text = text.replace("[model]\n", f'[model]\npositional = "{variant}"\n', 1)
    subs = {"seed": str(seed), "steps": str(steps), "name": f'"row_e_{task}_{variant}_s{seed}"'}
    if batch_tokens:
        subs["batch_tokens"] = str(batch_tokens)
    if task == "multi30k":
        subs["eval_interval"] = str(steps // 4)  # the last evaluation falls on the last update
    for key, value in subs.items():
        text, n = re.subn(rf"(?m)^{key} = [^\n]*$", f"{key} = {value}", text)
        if n == 0:
            text = text.replace("[train]\n", f"[train]\n{key} = {value}\n", 1)
    out.write_text(text, encoding="utf-8")
    return out


def run(args: list[str]) -> str:
    print("$ " + " ".join(args), flush=True)
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        raise SystemExit(f"failed: {' '.join(args)}")
    return proc.stdout


def reverse_nll(run_dir: Path, n: int = 1000, seed: int = 1) -> float:
    """Teacher-forced NLL per target token (no label smoothing) of the final checkpoint on fresh sequences."""
    import torch
    import torch.nn.functional as F

    from transformer_min.translation import synthetic as tasks
    from transformer_min.data.batch import make_batch
    from transformer_min.model.saved import load_model

    model = load_model(sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1])[0].eval()
    batch = make_batch(tasks.eval_set("reverse", n, seed), tasks.BOS_ID, tasks.EOS_ID, tasks.PAD_ID)
    with torch.no_grad():
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=tasks.PAD_ID,
                              reduction="sum")
    return float(nll) / int((batch.tgt_out != tasks.PAD_ID).sum())


def reverse_runs(variants: list[str], seeds: list[int], steps: int, work: Path) -> list[dict]:
    rows = []
    for seed in seeds:
        for variant in variants:
            cfg = derive_config("reverse", variant, seed, steps, None, work / f"reverse_{variant}_s{seed}.toml")
            name = f"row_e_reverse_{variant}_s{seed}"
            run(TMIN + ["train", "--config", str(cfg), "--out-dir", str(work / "runs"), "--name", name])
            run_dir = work / "runs" / name
            recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
            final = [r for r in recs if "eval_accuracy" in r][-1]
            rows.append({"task": "reverse", "variant": variant, "seed": seed, "updates": final["step"],
                         "accuracy": final["eval_accuracy"], "nll": reverse_nll(run_dir)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def multi30k_runs(variants: list[str], seeds: list[int], steps: int, batch_tokens: int, work: Path) -> list[dict]:
    rows = []
    for seed in seeds:
        for variant in variants:
            cfg = derive_config("multi30k", variant, seed, steps, batch_tokens, work / f"m30k_{variant}_s{seed}.toml")
            out = run([sys.executable, "benchmarks/multi30k.py", "--directions", "de_en", "--config", str(cfg),
                       "--steps", str(steps), "--alphas", ""])
            result = json.loads(Path(re.search(r"results: (\S+)", out).group(1)).read_text())["de_en"]
            scored = result[f"{steps}steps"]
            summary = scored["summary"]
            rows.append({"task": "multi30k_de_en", "variant": variant, "seed": seed, "updates": summary["steps"],
                         "tokens_per_update": round(summary["tokens_per_update"]), "nll": summary["val"][-1][1],
                         "bleu": scored["averaged"]["bleu"], "machine": summary["machine"]})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Per task and variant: mean and spread over seeds, and which differences are within noise."""
    lines = []
    for task in sorted({r["task"] for r in rows}):
        score = "accuracy" if task == "reverse" else "bleu"
        mine = [r for r in rows if r["task"] == task]
        lines.append(f"\n{task}: {mine[0]['updates']} updates" + (
            f", {mine[0]['tokens_per_update']} target tokens per update" if "tokens_per_update" in mine[0] else ""))
        lines.append(f"{'variant':12s} {'seeds':>6s} {score:>16s} {'val nll':>16s}")
        stats = {}
        for variant in [v for v in VARIANTS if any(r["variant"] == v for r in mine)]:
            got = [r for r in mine if r["variant"] == variant]
            s, n = [r[score] for r in got], [r["nll"] for r in got]
            stats[variant] = (statistics.mean(s), max(s) - min(s), len(s))
            lines.append(f"{variant:12s} {len(got):6d} {statistics.mean(s):10.3f} ±{(max(s) - min(s)) / 2:5.3f} "
                         f"{statistics.mean(n):10.4f} ±{(max(n) - min(n)) / 2:5.4f}")
        ranked = sorted(stats, key=lambda v: -stats[v][0])
        for a, b in zip(ranked, ranked[1:]):
            gap, noise = stats[a][0] - stats[b][0], max(stats[a][1], stats[b][1])
            verdict = ("within run-to-run noise" if gap <= noise + 1e-9 else "beyond run-to-run noise") if \
                min(stats[a][2], stats[b][2]) > 1 else "one seed: noise unknown"
            lines.append(f"  {a} - {b}: {gap:+.3f} {score} (seed spread {noise:.3f}): {verdict}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", choices=["reverse", "multi30k", "table"])
    ap.add_argument("results", nargs="*", help="with `table`: result files of earlier runs")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, help="updates per run (reverse 200, multi30k 1456)")
    ap.add_argument("--batch-tokens", type=int, default=1200, help="multi30k: tokens per batch before packing")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    if a.task == "table":
        print(table([row for f in a.results for row in json.loads(Path(f).read_text())]))
        return 0
    variants = [v for v in a.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    seeds = [int(s) for s in a.seeds.split(",") if s]
    stamp = time.strftime("%Y%m%d_%H%M")
    work = ROOT / "runs" / f"row_e_{a.task}_{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    if a.task == "reverse":
        rows = reverse_runs(variants, seeds, a.steps or 200, work)
    else:
        rows = multi30k_runs(variants, seeds, a.steps or 1456, a.batch_tokens, work)
    out = ROOT / "runs" / f"row_e_{a.task}_{stamp}.json"
    out.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(table(rows))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
