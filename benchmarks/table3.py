"""Table 3 of the paper, every row (A)-(E) and big, retrained at small scale with seeds (issue 26).

    python benchmarks/table3.py --dry-run                     # every row, variant, seed; the fields that differ
    python benchmarks/table3.py                               # the whole sweep into runs/table3 (resumable)
    python benchmarks/table3.py --rows base,A --steps 300     # some rows (slugs or groups), another budget
    python benchmarks/table3.py --results DIR --jobs 2 --threads 1 --time-limit 3600
    python benchmarks/table3.py --device cuda --results runs/table3_cuda    # a GPU: larger budget, many runs at once
    python benchmarks/table3.py table DIR [--markdown] [--all]  # the table of the finished runs in DIR

The base is the Multi30k De->En config of the row (E) runs (configs/multi30k_de_en.toml: d_model 256, h 4,
d_ff 1024, N 3) at batch_tokens 1200. Each row's config is derived from it by
`transformer_min.report.table3_plan` (the paper's change scaled by the paper's ratio to its own base), written
to DIR/configs/, read back through the loader and compared: only the row's fields and the bookkeeping ones
(seed, name, budget, out_dir, keep_last, device, data_dir) may differ, else the sweep stops.

One budget for every run: --steps updates (default 1,456) of --batch-tokens (default 1200, about 1,100 target
tokens per update after packing). Seeds 1,2,3 for the base, 1,2 for every other row.

Each run is `tmin train` (resumed with `tmin train --resume` when a checkpoint exists), then `tmin eval` of
the last checkpoint on val and test_2016_flickr (beam 4, alpha 0.6, no averaging: Table 3's dev-set
protocol). Its record goes to DIR/results/<row>_s<seed>.json: a finished run is read from there, not redone;
a cut-off one (Ctrl-C, --time-limit, a lost machine) continues from its latest checkpoint. Runs go to
DIR/runs/ (--runs-dir), the logs of every command to DIR/logs/. Relative paths are relative to the
repository root; the data folder is --data-dir, default the base config's data.data_dir.

Several runs at once (--jobs, default cores // --threads), each in its own processes, with a progress line per
run and for the sweep every --progress seconds. The table, the verdicts and the figure come from
`transformer_min.report.table3_measured` (also `tmin report --table3 DIR`); `table` also writes the
figure, Δ BLEU per row against the paper's, to DIR/table3_delta_bleu.png. Row (E) extended with rotary
and relative positions is benchmarks/table3_row_e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from transformer_min.core.config import Config, config_to_dict  # noqa: E402
from transformer_min.core.errors import ConfigError, DataError  # noqa: E402
from transformer_min.core.project import load_project  # noqa: E402
from transformer_min.core.io import atomic_write_text  # noqa: E402
from transformer_min.report import table3_measured as tm  # noqa: E402
from transformer_min.report import table3_plan as plan  # noqa: E402
from transformer_min.verify.summary import summarize  # noqa: E402

TMIN = [sys.executable, "-m", "transformer_min"]
BASE_CONFIG = "configs/multi30k_de_en.toml"
BUDGETS = {"cpu": (1456, 1200), "cuda": (1456, 3600)}  # (updates, batch_tokens): the GPU's 3x tokens per update
BEAM, ALPHA = 4, 0.6  # section 6.1, as Table 3 was decoded
LONG_ROWS = "base,D_drop0,D_drop2,C_N4"  # --long: the rows whose 1x verdicts oppose the paper, and the base
LONG_TIMES = (1, 2, 3, 4)  # --long: budgets 1x..4x of --steps, all points of one run (eq. 3 ignores the total)
# On a CPU every run is fp32, whatever the CPU: precision "auto" would train bf16 where the CPU has native
# bf16 (AVX512_BF16, AMX) and fp32 elsewhere, and the runs of one table must be comparable across machines
# (the 1x sweep ran fp32 on an AVX2 CPU). A GPU keeps "auto" (bf16 autocast on CUDA 8.0+).
PRECISION = {"cpu": "fp32", "cuda": "auto"}
LOSS_KERNEL = "paper"  # train.loss_kernel of every sweep run (the fused loss came after the records)
AVERAGE_LAST = 5  # section 6.1: the last 5 checkpoints averaged (the base rows at their largest budget)


_PRINT = threading.Lock()


def say(line: str) -> None:
    """One whole line at a time from any worker thread."""
    with _PRINT:
        print(line, flush=True)


class Stopped(Exception):
    """The sweep was asked to stop (Ctrl-C or --time-limit): the run keeps its checkpoint."""


@dataclass(frozen=True)
class Spec:
    variant: plan.Variant
    seed: int

    @property
    def id(self) -> str:
        return f"{self.variant.slug}_s{self.seed}"


@dataclass
class Sweep:
    base: Config
    results: Path
    runs: Path
    steps: int
    batch_tokens: int
    device: str
    data_dir: str
    threads: int
    budgets: tuple[int, ...] = ()  # --long / --budgets: one run per row and seed, measured at each of these
    deadline: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    state: dict = field(default_factory=dict)  # run id -> what it is doing now

    @property
    def long(self) -> Path:
        """Where the longer budgets go, beside the 1x records of results/: RESULTS/budgets/."""
        return self.results / tm.BUDGETS_DIR

    def bookkeeping(self, spec: Spec) -> dict:
        # A long run keeps its last 5 checkpoints: the average of section 6.1 at its largest budget.
        return {"train.seed": spec.seed, "train.name": spec.id,
                "train.steps": max(self.budgets) if self.budgets else self.steps,
                "train.time_budget_minutes": 0.0, "train.batch_tokens": self.batch_tokens,
                "train.out_dir": rel(self.runs), "train.keep_last": AVERAGE_LAST if self.budgets else 1,
                "train.device": self.device, "train.precision": PRECISION[self.device], "data.data_dir": self.data_dir,
                # the loss path every committed record was trained with: a rerun from a fresh clone repeats them
                "train.loss_kernel": LOSS_KERNEL}

    def stopping(self) -> bool:
        if self.deadline is not None and time.time() > self.deadline:
            self.stop.set()
        return self.stop.is_set()


def rel(p: Path) -> str:
    """A path as the children see it (they run in the repository root)."""
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def at_root(p: str) -> Path:
    return Path(p) if Path(p).is_absolute() else ROOT / p


# ------------------------------------------------------------------ configs
def write_config(sweep: Sweep, spec: Spec, folder: Path) -> tuple[Path, dict]:
    """Derive the run's config, write it, read it back through the loader and check what differs from the
    base: the row's fields and the bookkeeping ones only. -> (path, {field: (base, run)} of the row)."""
    from transformer_min.training.run_dir import to_toml

    cfg = plan.derive(sweep.base, spec.variant, sweep.bookkeeping(spec))
    path = folder / f"{spec.id}.toml"
    atomic_write_text(path, f"# benchmarks/table3.py: Table 3 {spec.variant.row}, seed {spec.seed}\n"
                      + to_toml(config_to_dict(cfg)))
    back = load_project(path, env={}, quiet=True).config
    diff = plan.differing(sweep.base, back)
    row_fields = set(plan.changes(spec.variant, sweep.base))
    stray = sorted(set(diff) - row_fields - set(plan.BOOKKEEPING))
    lost = sorted(f for f in row_fields if f not in diff)
    if stray or lost:
        raise SystemExit(f"{path}: differs from the base in {stray} beyond row {spec.variant.row!r}, or lost its "
                         f"change {lost}; this is a bug in table3_plan")
    return path, {f: diff[f] for f in sorted(row_fields)}


def same(key: str, have: object, want: object) -> bool:
    """A manifest's field equals this sweep's. For the base, a key the manifest lacks counts as its default:
    a config key added after the sweep was recorded (decode.precision, say), left at its default, changes no
    run, and the sweep's earlier records stay comparable. A key set away from its default still differs."""
    if key != "base" or not isinstance(have, dict) or not isinstance(want, dict):
        return have == want
    defaults = config_to_dict(Config())
    for section, values in want.items():
        got = have.get(section, {})
        if not isinstance(got, dict) or not isinstance(values, dict):
            if got != values:
                return False
            continue
        fallback = defaults.get(section, {})
        for name, value in values.items():
            if got.get(name, fallback.get(name, object())) != value:
                return False
        if set(got) - set(values):  # a key this version no longer has: another base
            return False
    return not set(have) - set(want)


def check_manifest(sweep: Sweep, base_path: str) -> None:
    """DIR/sweep.json holds the budget and the base: a second sweep into DIR must use the same. A long sweep
    keeps its own, DIR/budgets/sweep.json (its budgets may grow: a later session adds 8x), and where DIR holds
    a 1x sweep it must share that sweep's base, batch and device (its 1,456-update points are compared)."""
    base = config_to_dict(sweep.base)
    base["data"].pop("data_dir")
    base["train"].pop("out_dir")
    want = {"steps": sweep.steps, "batch_tokens": sweep.batch_tokens, "device": sweep.device, "base": base}
    folder = sweep.long if sweep.budgets else sweep.results
    path = folder / "sweep.json"
    have = read_manifest(sweep.results) if (sweep.results / "sweep.json").exists() else None
    if sweep.budgets:
        if have is not None:
            bad = [k for k in ("batch_tokens", "device", "base") if not same(k, have.get(k), want[k])]
            if bad:
                raise SystemExit(f"{sweep.results / 'sweep.json'}: the 1x sweep there has another "
                                 f"{', '.join(bad)}; fix: rerun with its --batch-tokens and --device and base "
                                 "config, or pass another --results folder")
        mine = read_manifest(folder) if path.exists() else None
        if mine is not None:
            bad = [k for k in ("batch_tokens", "device", "base") if not same(k, mine.get(k), want[k])]
            if bad:
                raise SystemExit(f"{path}: this folder holds longer budgets of another {', '.join(bad)}; fix: "
                                 "rerun with those, or pass another --results folder")
        earlier = mine.get("budgets", []) if mine else []
        if not isinstance(earlier, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in earlier):
            raise SystemExit(f"{path}: 'budgets' is not a list of update counts; fix: delete this file (the next "
                             "run writes it again; the records beside it are kept)")
        known = sorted(set(sweep.budgets) | set(earlier))
        want = {"budgets": known, "batch_tokens": sweep.batch_tokens, "device": sweep.device, "base": base}
    elif have is not None:
        bad = [k for k in want if not same(k, have.get(k), want[k])]
        if bad:
            raise SystemExit(f"{path}: this results folder holds a sweep with another {', '.join(bad)} "
                             f"(steps {have.get('steps')}, batch_tokens {have.get('batch_tokens')}, device "
                             f"{have.get('device')}); fix: rerun with those, or pass another --results folder")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({**want, "base_config": base_path}, indent=2))


def read_manifest(folder: Path) -> dict:
    try:
        return tm.read_manifest(folder)
    except DataError as e:
        raise SystemExit(f"{e} (the runs' records are kept)") from None


# ------------------------------------------------------------------ one run
def sh(sweep: Sweep, args: list[str], log: Path) -> None:
    """One tmin command in its own process, output to `log`; SIGINT on a stop (train checkpoints and exits)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(sweep.threads), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ tmin {' '.join(args)}\n")
        out.flush()
        # Its own session: a Ctrl-C reaches the sweep only, which passes on exactly one SIGINT (a second one
        # could cut the checkpoint the first one makes tmin train write).
        proc = subprocess.Popen(TMIN + args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        while True:
            try:
                rc = proc.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                if sweep.stopping():
                    proc.send_signal(signal.SIGINT)
                    proc.wait()
                    raise Stopped() from None
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise RuntimeError(f"tmin {args[0]} exited {rc}; last lines of {rel(log)}:\n  " + "\n  ".join(tail))


def last_step(run_dir: Path) -> int:
    from transformer_min.model.saved import CKPT_RE, latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    return int(CKPT_RE.match(ckpt.name).group(1)) if ckpt else 0


def train(sweep: Sweep, spec: Spec, cfg_path: Path, run_dir: Path, log: Path, to: int | None = None) -> None:
    """Train to `to` updates (default the budget): fresh, or --resume from the latest checkpoint (exactly:
    tmin train --resume). A long run stops at each budget point in turn; eq. (3) does not depend on the total,
    so its point at 1,456 updates is the 1x run's model."""
    to = to or sweep.steps
    done = last_step(run_dir)
    if done >= to:
        return
    if done:
        sweep.state[spec.id] = f"resuming from update {done} to {to}"
        sh(sweep, ["train", "--resume", rel(run_dir), "--steps", str(to)], log)
    else:  # a run cut off before its first checkpoint starts again in its own folder
        sweep.state[spec.id] = f"training to {to}"
        sh(sweep, ["train", "--config", rel(cfg_path), "--name", spec.id, "--steps", str(to)]
           + (["--overwrite"] if run_dir.exists() else []), log)
    if sweep.stopping():  # interrupted between two polls: it saved a checkpoint and exited 0
        raise Stopped()


def evaluate(sweep: Sweep, cfg_path: Path, ckpt: Path, split: str, log: Path) -> dict:
    """val or test BLEU of one checkpoint, beam 4, alpha 0.6 (read back when done already)."""
    out = ckpt.parent.parent / f"hyp.{split}.{ckpt.stem}.txt"
    record = Path(f"{out}.json")
    if record.exists():
        rec = json.loads(record.read_text(encoding="utf-8"))
        same = Path(rec.get("checkpoint", "")).resolve() == ckpt.resolve()
        if same and (rec.get("beam"), rec.get("alpha")) == (BEAM, ALPHA):
            return rec
    sh(sweep, ["eval", "--config", rel(cfg_path), "--checkpoint", rel(ckpt), "--split", split,
               "--beam", str(BEAM), "--alpha", str(ALPHA), "--hyp-out", rel(out)], log)
    return json.loads(record.read_text(encoding="utf-8"))


def read_log(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def training_record(run_dir: Path, steps: int) -> dict:
    """Updates, target tokens per update, seconds, the val NLL at update `steps` and the machine."""
    recs = [r for r in read_log(run_dir) if r.get("step", 0) <= steps]  # a long run's log goes on past `steps`
    by_step = {r["step"]: r for r in recs if "loss" in r}  # a resume dropped the records after its checkpoint
    final = [r for r in recs if "final_val_nll" in r and r["step"] == steps]
    evals = [r for r in by_step.values() if "eval_val_nll" in r and r["step"] == steps]
    if not final and not evals:
        raise RuntimeError(f"{rel(run_dir)}/metrics.jsonl: no validation at update {steps}")
    nll = final[-1]["final_val_nll"] if final else evals[-1]["eval_val_nll"]
    machine = {k: sorted({str(r.get(k)) for r in recs if r.get("event") == "start"})
               for k in ("precision", "device", "threads", "cpu", "cpu_capability", "gpu")}
    # The updates are the last step's number, not the records counted: a log that lost records to a kill
    # (before the trainer fsynced it ahead of each checkpoint) still trained every step; train_seconds is
    # the checkpoint's running total, and the tokens per update are averaged over the records kept.
    updates = max(by_step)
    secs = by_step[updates]["train_seconds"]
    return {"updates": updates, "tokens_per_update": sum(r["tokens"] for r in by_step.values()) / len(by_step),
            "train_seconds": secs, "seconds_per_update": secs / updates, "val_nll": nll, "machine": machine}


def train_nll(run_dir: Path, steps: int, window: int = 100) -> float:
    """The mean training NLL (dropout on, no smoothing) of the `window` updates up to `steps`: beside the val
    NLL at `steps`, the train-val gap that overfitting opens and dropout acts on."""
    got = {r["step"]: r["nll"] for r in read_log(run_dir) if "nll" in r and steps - window < r["step"] <= steps}
    if not got:
        raise RuntimeError(f"{rel(run_dir)}/metrics.jsonl: no training records before update {steps}")
    return sum(got.values()) / len(got)


def parameters(cfg_path: Path) -> int:
    """The run's parameter count, its model built on the meta device (nothing allocated)."""
    import torch

    from transformer_min.model.transformer import build_model, count_parameters

    with torch.device("meta"):
        return count_parameters(build_model(load_project(cfg_path, env={}, quiet=True).config))


def run_one(sweep: Sweep, spec: Spec) -> tuple[str, dict]:
    """-> ("read" | "done", the run's record)."""
    import math

    result = sweep.results / "results" / f"{spec.id}.json"
    if result.exists():
        rec = json.loads(result.read_text(encoding="utf-8"))
        if (rec.get("updates"), rec.get("batch_tokens"), rec.get("device")) != (sweep.steps, sweep.batch_tokens,
                                                                                sweep.device):
            raise RuntimeError(f"{rel(result)}: another budget; delete it or use another --results folder")
        return "read", rec
    cfg_path, changed = write_config(sweep, spec, sweep.results / "configs")
    run_dir, log = sweep.runs / spec.id, sweep.results / "logs" / f"{spec.id}.log"
    train(sweep, spec, cfg_path, run_dir, log)
    rec = training_record(run_dir, sweep.steps)
    from transformer_min.model.saved import latest_checkpoint

    ckpt, d = latest_checkpoint(run_dir), sweep.base.data
    sweep.state[spec.id] = "val BLEU, beam 4"
    val = evaluate(sweep, cfg_path, ckpt, d.valid_split, log)
    sweep.state[spec.id] = "test BLEU, beam 4"
    test = evaluate(sweep, cfg_path, ckpt, d.test_split, log)
    rec = {"row": spec.variant.row, "slug": spec.variant.slug, "seed": spec.seed, "id": spec.id,
           "changes": {k: list(v) for k, v in changed.items()}, "batch_tokens": sweep.batch_tokens,
           "device": sweep.device, **rec, "val_ppl": math.exp(rec["val_nll"]), "val_bleu": val["bleu"],
           "test_bleu": test["bleu"], "params": parameters(cfg_path), "checkpoint": rel(ckpt),
           "bleu_signature": val.get("bleu_signature", ""), "date": time.strftime("%Y-%m-%d %H:%M")}
    atomic_write_text(result, json.dumps(rec, indent=2))
    return "done", rec


def budget_checkpoint(run_dir: Path, updates: int) -> Path | None:
    from transformer_min.model.saved import CKPT_RE, list_checkpoints

    return next((p for p in list_checkpoints(run_dir) if int(CKPT_RE.match(p.name).group(1)) == updates), None)


def one_x_check(sweep: Sweep, spec: Spec, rec: dict) -> dict | None:
    """The 1x record of the same row and seed (RESULTS/results/<id>.json) beside this run's point at the same
    update: equal on the same kind of CPU, which proves the schedule claim and is a joint test of resume and
    keep-last. None where there is no 1x record of that budget."""
    path = sweep.results / "results" / f"{spec.id}.json"
    if not path.exists():
        return None
    one = json.loads(path.read_text(encoding="utf-8"))
    if (one.get("updates"), one.get("batch_tokens"), one.get("device")) != (rec["updates"], sweep.batch_tokens,
                                                                            sweep.device):
        return None
    diff = {k: rec[k] - one[k] for k in ("val_nll", "val_bleu", "test_bleu")}
    same_cpu = one.get("machine", {}).get("cpu_capability") == rec["machine"]["cpu_capability"]
    return {"record": rel(path), "diff": diff, "same_cpu_capability": same_cpu,
            "equal": all(abs(v) <= 1e-6 for v in diff.values())}


def run_long(sweep: Sweep, spec: Spec) -> tuple[str, dict]:
    """One run of a row and seed measured at every budget (--long): train to the next budget point, evaluate
    its checkpoint as Table 3 is measured, write RESULTS/budgets/<id>_u<updates>.json, go on. A point already
    recorded is read, not redone; a missing one is measured from its checkpoint on resume."""
    import math

    cfg_path, changed = write_config(sweep, spec, sweep.long / "configs")
    run_dir, log = sweep.runs / spec.id, sweep.long / "logs" / f"{spec.id}.log"
    how, rec, before = "read", {}, None
    for b in sweep.budgets:
        path = sweep.long / f"{spec.id}_u{b}.json"
        if path.exists():
            rec = json.loads(path.read_text(encoding="utf-8"))
            if (rec.get("updates"), rec.get("batch_tokens"), rec.get("device")) != (b, sweep.batch_tokens,
                                                                                    sweep.device):
                raise RuntimeError(f"{rel(path)}: another budget; delete it or use another --results folder")
            before = rec
            continue
        how = "done"
        train(sweep, spec, cfg_path, run_dir, log, to=b)
        ckpt = budget_checkpoint(run_dir, b)
        if ckpt is None:
            raise RuntimeError(f"{rel(run_dir)}: no checkpoint of update {b} (the run is at update "
                               f"{last_step(run_dir)}, and keep-last pruned it before it was measured); fix: delete "
                               f"{rel(run_dir)} to train it again, or drop {b} from --budgets")
        rec = training_record(run_dir, b)
        d = sweep.base.data
        sweep.state[spec.id] = f"update {b}: val BLEU, beam 4"
        val = evaluate(sweep, cfg_path, ckpt, d.valid_split, log)
        sweep.state[spec.id] = f"update {b}: test BLEU, beam 4"
        test = evaluate(sweep, cfg_path, ckpt, d.test_split, log)
        if before:  # this segment's own speed: a resume on another machine shows here
            rec["segment_seconds_per_update"] = ((rec["train_seconds"] - before["train_seconds"])
                                                 / (b - before["updates"]))
        rec = {"row": spec.variant.row, "slug": spec.variant.slug, "seed": spec.seed, "id": spec.id,
               "budget": b, "changes": {k: list(v) for k, v in changed.items()}, "batch_tokens": sweep.batch_tokens,
               "device": sweep.device, **rec, "val_ppl": math.exp(rec["val_nll"]), "train_nll": train_nll(run_dir, b),
               "val_bleu": val["bleu"], "test_bleu": test["bleu"], "params": parameters(cfg_path),
               "checkpoint": rel(ckpt), "bleu_signature": val.get("bleu_signature", ""),
               "date": time.strftime("%Y-%m-%d %H:%M")}
        rec["one_x"] = one_x_check(sweep, spec, rec)
        if b == max(sweep.budgets) and spec.variant is plan.BASE:
            rec.update(averaged(sweep, cfg_path, run_dir, b, log))
        atomic_write_text(path, json.dumps(rec, indent=2))
        before = rec
        say(f"  [run] {spec.id}: update {b:,}: val PPL {rec['val_ppl']:.2f}, val BLEU {rec['val_bleu']:.2f}, "
            f"test BLEU {rec['test_bleu']:.2f}, train NLL {rec['train_nll']:.3f} / val NLL {rec['val_nll']:.3f}")
    return how, rec


def averaged(sweep: Sweep, cfg_path: Path, run_dir: Path, updates: int, log: Path) -> dict:
    """Test BLEU of the last AVERAGE_LAST checkpoints averaged (section 6.1, `tmin average`) at `updates`."""
    from transformer_min.model.saved import CKPT_RE, list_checkpoints

    last = list_checkpoints(run_dir)[-AVERAGE_LAST:]
    if int(CKPT_RE.match(last[-1].name).group(1)) != updates:
        raise RuntimeError(f"{rel(run_dir)}: the newest checkpoint is not update {updates}; nothing averaged")
    out = run_dir / "averaged" / f"averaged_u{updates}.pt"
    if not out.exists():
        out.parent.mkdir(exist_ok=True)
        sh(sweep, ["average", rel(run_dir), "--last", str(AVERAGE_LAST), "--out", rel(out)], log)
    test = evaluate(sweep, cfg_path, out, sweep.base.data.test_split, log)
    return {"averaged": [p.name for p in last], "test_bleu_avg": test["bleu"]}


# ------------------------------------------------------------------ the sweep
def specs(rows: str, seeds: list[int], base_seeds: list[int]) -> list[Spec]:
    wanted = [w for w in rows.split(",") if w]
    named = {w: [v for v in plan.VARIANTS if w in (v.slug, v.group, v.row)] for w in wanted}
    # Runs go in the order --rows names them (a group in the table's order), so a short session can
    # put the rows it wants first; with no --rows, the table's order.
    chosen = list(dict.fromkeys(v for w in wanted for v in named[w])) if wanted else list(plan.VARIANTS)
    unknown = [w for w in wanted if not named[w]]
    if unknown:
        raise SystemExit(f"--rows: unknown {', '.join(unknown)}; choose slugs "
                         f"({', '.join(v.slug for v in plan.VARIANTS)}) or groups (A, B, C, D, E, big)")
    return [Spec(v, s) for v in chosen for s in (base_seeds if v is plan.BASE else seeds)]


def run_line(sweep: Sweep, spec: Spec) -> str:
    """`  A_h1_s1: training, update 350/1456 (0.52 s/update)` from the run's metrics.jsonl."""
    what = sweep.state.get(spec.id, "")
    path = sweep.runs / spec.id / "metrics.jsonl"
    if what.startswith(("training", "resuming")) and path.exists():
        steps = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if '"loss"' in x]
        if steps:
            s = steps[-1]
            to = max(sweep.budgets) if sweep.budgets else sweep.steps
            what = f"training, update {s['step']}/{to} ({s['train_seconds'] / s['step']:.2f} s/update)"
    return f"  [run] {spec.id}: {what}"


def progress(sweep: Sweep, todo: list[Spec], done: dict, t0: float) -> None:
    running = [s for s in todo if sweep.state.get(s.id, "stopped") != "stopped" and s.id not in done]
    new = [r for r in done.values() if r[0] == "done"]
    left = len(todo) - len(done)
    eta = ""
    if new and left:
        per_run = (time.time() - t0) / len(new)
        eta = f"; about {per_run * left / 60:.0f} min left at this pace"
    say(f"[sweep] {len(done)}/{len(todo)} runs finished ({sum(r[0] == 'read' for r in done.values())} read "
          f"from earlier), {len(running)} running, {left - len(running)} waiting; "
          f"{(time.time() - t0) / 60:.1f} min{eta}")
    for s in running:
        say(run_line(sweep, s))


def worker(sweep: Sweep, spec: Spec, done: dict) -> None:
    if sweep.stopping():
        return
    sweep.state[spec.id] = "starting"
    t = time.time()
    try:
        how, rec = (run_long if sweep.budgets else run_one)(sweep, spec)
    except Stopped:
        sweep.state[spec.id] = "stopped"
        say(f"  [run] {spec.id}: stopped; it resumes from its latest checkpoint next time")
        return
    except (Exception, SystemExit) as e:  # one failed run does not stop the others; its log says why
        done[spec.id] = ("failed", {})
        say(f"  [run] {spec.id}: FAILED: {e}")
        return
    done[spec.id] = (how, rec)
    say(f"  [run] {spec.id}: {'read from earlier' if how == 'read' else f'done in {(time.time() - t) / 60:.1f} min'}"
        f": val PPL {rec['val_ppl']:.2f}, val BLEU {rec['val_bleu']:.2f}, test BLEU {rec['test_bleu']:.2f}, "
        f"{rec['params']:,} parameters, {rec['updates']} updates of {rec['tokens_per_update']:.0f} target tokens")


def record_paths(sweep: Sweep, spec: Spec) -> list[Path]:
    """The records a run writes: RESULTS/results/<id>.json, or one per budget in RESULTS/budgets/."""
    if sweep.budgets:
        return [sweep.long / f"{spec.id}_u{b}.json" for b in sweep.budgets]
    return [sweep.results / "results" / f"{spec.id}.json"]


def run_sweep(sweep: Sweep, todo: list[Spec], jobs: int, every: float) -> int:
    """Prepare the data once, then the runs `jobs` at a time; -> 0, 1 (a run failed) or 2 (stopped)."""
    if any(not all(p.exists() for p in record_paths(sweep, s)) for s in todo):  # else nothing to train
        cfg_path, _ = write_config(sweep, todo[0], (sweep.long if sweep.budgets else sweep.results) / "configs")
        sh(sweep, ["data", "prepare", "--config", rel(cfg_path)], sweep.results / "logs" / "prepare.log")
    done: dict = {}
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(worker, sweep, s, done) for s in todo]
        try:
            last = 0.0
            while not all(f.done() for f in futures):
                time.sleep(0.5)
                if time.time() - last >= every:
                    progress(sweep, todo, done, t0)
                    last = time.time()
        except KeyboardInterrupt:
            sweep.stop.set()
            say("[sweep] stopping: every running run saves a checkpoint")
    for f in futures:  # a bug in the sweep itself is shown, not lost in its thread
        if f.exception() is not None:
            say(f"[sweep] internal error: {f.exception()!r}")
    progress(sweep, todo, done, t0)
    failed = [k for k, (how, _) in done.items() if how == "failed"]
    if len(done) < len(todo):
        say(f"[sweep] stopped with {len(todo) - len(done)} runs unfinished; rerun the same command to go on")
    if failed:
        say(f"[sweep] failed: {', '.join(failed)} (logs in {rel(sweep.results / 'logs')})")
    print_table(sweep.results, long=bool(sweep.budgets))
    return 1 if failed else (2 if len(done) < len(todo) else 0)


def dry_run(sweep: Sweep, todo: list[Spec], jobs: int) -> int:
    """Every row, variant and seed, with what its derived config (written and read back) changes."""
    import tempfile

    print(f"Table 3 sweep, dry run: base {rel(Path(sweep.base.source))} (data {sweep.data_dir}), results "
          f"{rel(sweep.results)}, runs {rel(sweep.runs)}")
    print(f"budget per run: {sweep.steps:,} updates of batch_tokens {sweep.batch_tokens:,} (the target tokens per "
          f"update are measured per run: 1,086 at batch_tokens 1200 on Multi30k De->En), device {sweep.device}, "
          f"{sweep.threads} thread(s) per run, {jobs} runs at once")
    if sweep.budgets:
        print(f"longer budgets: one run per row and seed, measured at updates "
              f"{', '.join(f'{b:,}' for b in sweep.budgets)} (val PPL, val BLEU and test BLEU at each, beam {BEAM}, "
              f"alpha {ALPHA}, no averaging); records in {rel(sweep.long)}/<run>_u<updates>.json beside the 1x "
              f"records of {rel(sweep.results / 'results')}")
        for spec in todo:
            have = [b for b, path in zip(sweep.budgets, record_paths(sweep, spec)) if path.exists()]
            print(f"  {spec.id:14s} points measured: {', '.join(map(str, have)) or 'none'}; to measure: "
                  f"{', '.join(str(b) for b in sweep.budgets if b not in have) or 'none'}")
    seeds: dict[plan.Variant, list[int]] = {}
    for s in todo:
        seeds.setdefault(s.variant, []).append(s.seed)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'row':22s} {'run':10s} {'seeds':8s} fields that differ from the base (base -> run)")
        for v, ss in seeds.items():
            _, changed = write_config(sweep, Spec(v, ss[0]), Path(tmp))
            text = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) or "(none: the base)"
            print(f"{v.row:22s} {v.slug:10s} {','.join(map(str, ss)):8s} {text}")
        book = plan.differing(sweep.base, plan.apply(sweep.base, sweep.bookkeeping(todo[0])))
        print("every run also sets: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in book.items()
                                                  if k not in ("train.seed", "train.name"))
              + "; train.seed and train.name per run")
    print(f"{len(seeds)} rows ({len(seeds) - (plan.BASE in seeds)} variants"
          f"{' and the base' if plan.BASE in seeds else ''}), {len(todo)} runs"
          + (f", {len(todo) * len(sweep.budgets)} budget points" if sweep.budgets else ""))
    return 0


def planned(results: Path) -> dict[str, float]:
    """{row: millions of parameters} of every row, from the base the sweep wrote to RESULTS/sweep.json."""
    try:
        got = tm.load_planned(results)
    except DataError as e:
        raise SystemExit(f"table --all: {e}; or drop --all") from None
    if got is None:
        raise SystemExit(f"table --all: {results / 'sweep.json'} is missing; fix: pass the results folder the "
                         "sweep wrote, or drop --all")
    return got


def print_table(results: Path, markdown: bool = False, every_row: bool = False, long: bool = False) -> int:
    if long:
        return print_budget_table(results, markdown)
    try:
        found = tm.load_results(results)
    except Exception as e:  # noqa: BLE001 - a folder without results yet prints why
        print(f"(no table: {e})")
        return 1
    b = tm.budget(found)
    print(f"\nTable 3 at small scale: {b['updates']:,} updates of about {b['tokens_per_update']:,.0f} target tokens "
          f"(batch_tokens {b['batch_tokens']}), device {b['device']}; {len(found)} runs")
    rows = tm.table_rows(found, planned(results) if every_row else None)
    print((tm.format_markdown if markdown else tm.format_text)(tm.HEADERS, rows))
    judged = tm.judge(tm.stats(found))
    counts = summarize((f"{j.row} {j.metric}", "PASS" if j.holds else "FAIL") for j in judged)
    print(f"\n{len(counts.passed)} of {counts.total} (row, metric) conclusions of the paper hold beyond noise at this "
          "scale; the rest: not reproduced at this scale")
    if judged:  # the figure of the report: Δ BLEU per row, ours against the paper
        from transformer_min.core.io import atomic_write_bytes
        from transformer_min.report.figures import Artifacts
        from transformer_min.report.table3_retrained import delta_figure

        path = results / "table3_delta_bleu.png"
        atomic_write_bytes(path, delta_figure(Artifacts(), judged, []).png)
        print(f"figure: {rel(path)}")
    return 0


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a whole number > 0; fix: a whole number such as 1 or 2")
    return n


def seed_list(text: str) -> list[int]:
    """'1,2' -> [1, 2]: seeds are whole numbers >= 0, at least one, each once."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a list of seeds; fix: whole numbers >= 0, comma-"
                                         "separated, each once, e.g. 1,2")
    return [int(p) for p in parts]


def budget_list(text: str) -> tuple[int, ...]:
    """'1456,2912' -> (1456, 2912): update counts > 0, increasing."""
    try:
        got = tuple(int(p) for p in text.split(","))
    except ValueError:
        got = ()
    if not got or min(got) <= 0 or list(got) != sorted(set(got)):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a list of budgets; fix: update counts > 0 in "
                                         "increasing order, e.g. 1456,2912,4368,5824")
    return got


def folder_arg(text: str) -> str:
    """A folder the sweep writes into: not a file, not under a file, a name the file system takes."""
    path = at_root(text)
    if any(len(part.encode()) > 255 for part in path.parts):
        raise argparse.ArgumentTypeError(f"{text[:60]!r}...: a name in this path is longer than 255 bytes; fix: "
                                         "a shorter folder name")
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{text[:120]!r}: {rel(p)[:120]} is a file, not a folder; fix: name a "
                                             "folder (it is created), e.g. runs/table3")
    return text


def print_budget_table(results: Path, markdown: bool = False) -> int:
    """The longer budgets of RESULTS/budgets/: per row and budget the change from the base, the noise and the
    verdict, and the figure of Δ val BLEU against updates."""
    from transformer_min.report import table3_budgets as tb

    try:
        points = tm.load_budgets(results)
    except DataError as e:
        print(f"(no table of the longer budgets: {e})")
        return 1
    if not points:
        print(f"(no table of the longer budgets: {rel(results / tm.BUDGETS_DIR)} holds no measured point yet)")
        return 1
    print(f"\nTable 3 at longer budgets: {len(points)} points of {len({p['id'] for p in points})} runs, updates "
          f"{', '.join(f'{b:,}' for b in tb.budgets_of(points))} (batch_tokens {points[0]['batch_tokens']}, device "
          f"{points[0]['device']})")
    print((tm.format_markdown if markdown else tm.format_text)(tb.HEADERS, tb.table_rows(points)))
    classes = tb.cpu_classes(points)
    print(f"trained on: {'; '.join(classes)}" + (" (more than one kind of CPU: fp32 rounds differently on each, so "
                                                 "compare points of one kind)" if len(classes) > 1 else ""))
    claims = tb.claims(points)
    for c in claims:
        print(f"  {tb.claim_line(c)}")
    if claims:
        from transformer_min.core.io import atomic_write_bytes
        from transformer_min.report.figures import Artifacts

        path = results / "table3_budgets_delta_bleu.png"
        atomic_write_bytes(path, tb.budget_figure(Artifacts(), points, []).png)
        print(f"figure: {rel(path)}")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="runs/table3", type=folder_arg, help="results folder (default runs/table3)")
    ap.add_argument("--runs-dir", type=folder_arg, help="where the run folders go (default RESULTS/runs; with "
                    "--long RESULTS/budgets/runs)")
    ap.add_argument("--config", default=BASE_CONFIG, help=f"the base config (default {BASE_CONFIG})")
    ap.add_argument("--data-dir", help="Multi30k folder (raw/ and tok/); default: the base config's data.data_dir")
    ap.add_argument("--rows", default="", help="row slugs or groups, e.g. base,A,C_N2, run in the order named "
                    f"(default: every row, in the table's order; with --long {LONG_ROWS})")
    ap.add_argument("--seeds", default=[1, 2], type=seed_list, help="seeds of every non-base row (default 1,2)")
    ap.add_argument("--base-seeds", type=seed_list, help="seeds of the base (default 1,2,3; with --long 1,2)")
    ap.add_argument("--steps", type=positive, help="updates per run (default 1456)")
    ap.add_argument("--long", action="store_true", help="longer budgets: one run per row and seed to 4x --steps, "
                    "measured at 1x, 2x, 3x and 4x (records in RESULTS/budgets/)")
    ap.add_argument("--budgets", type=budget_list, help="the update counts of --long (default 1456,2912,4368,5824)")
    ap.add_argument("--batch-tokens", type=positive, help="train.batch_tokens (default 1200; 3600 with --device cuda)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=positive, default=1, help="torch threads per run (default 1)")
    ap.add_argument("--jobs", type=positive, help="runs at once (default cores // threads; with cuda at most 12)")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds: then stop, checkpointing (0: none)")
    ap.add_argument("--progress", type=float, default=60, help="seconds between progress lines (default 60)")
    ap.add_argument("--dry-run", action="store_true", help="list the runs and their configs' changes; run nothing")
    a = ap.parse_args(argv)
    if a.budgets and not a.long:
        ap.error("--budgets is the update counts of --long; fix: add --long")
    if not (a.time_limit >= 0 and a.progress > 0):  # also refuses nan
        ap.error("--time-limit must be >= 0 and --progress > 0 seconds; fix: e.g. --time-limit 3600 --progress 60")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except (ConfigError, DataError) as e:  # a bad config or record: one line, no traceback
        raise SystemExit(f"table3.py: {e}") from None
    except OSError as e:  # a folder or name the file system refuses
        name = str(e.filename or "")
        raise SystemExit(f"table3.py: {name[:120]}{'...' if len(name) > 120 else ''}: {e.strerror or e}; fix: "
                         "a shorter name, or a folder you can write to") from None


def _main(argv: list[str]) -> int:
    if argv[:1] == ["table"]:
        ap = argparse.ArgumentParser(prog="table3.py table", description="the table of the finished runs")
        ap.add_argument("dir", help="results folder of a sweep")
        ap.add_argument("--markdown", action="store_true")
        ap.add_argument("--all", action="store_true", help="also the rows with no finished run, marked "
                        "'not yet run' (parameters from the base in DIR/sweep.json)")
        a = ap.parse_args(argv[1:])
        d = at_root(a.dir) if not Path(a.dir).exists() else Path(a.dir)
        long = (d / tm.BUDGETS_DIR).is_dir()
        rc = print_table(d, a.markdown, a.all) if (d / "results").is_dir() or not long else 0
        return (print_budget_table(d, a.markdown) or rc) if long else rc
    a = parse(argv)
    base = load_project(at_root(a.config), env={}, quiet=True).config
    steps, batch = BUDGETS[a.device]
    steps = a.steps or steps
    budgets = (a.budgets or tuple(steps * k for k in LONG_TIMES)) if a.long else ()
    results = at_root(a.results)
    runs = at_root(a.runs_dir) if a.runs_dir else results / (f"{tm.BUDGETS_DIR}/runs" if budgets else "runs")
    sweep = Sweep(base, results, runs, steps, a.batch_tokens or batch, a.device, a.data_dir or base.data.data_dir,
                  a.threads, budgets)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    jobs = a.jobs or max(1, min(cores // a.threads, 12 if a.device == "cuda" else cores))
    base_seeds = a.base_seeds or (a.seeds if budgets else [1, 2, 3])
    todo = specs(a.rows or (LONG_ROWS if budgets else ""), a.seeds, base_seeds)
    if a.dry_run:
        return dry_run(sweep, todo, jobs)
    if a.time_limit:
        sweep.deadline = time.time() + a.time_limit
    results.mkdir(parents=True, exist_ok=True)
    check_manifest(sweep, rel(at_root(a.config)))
    what = (f"measured at updates {', '.join(f'{b:,}' for b in budgets)}" if budgets
            else f"{sweep.steps:,} updates")
    print(f"Table 3 sweep: {len(todo)} runs, {what} of batch_tokens {sweep.batch_tokens:,} each, "
          f"device {a.device}, {jobs} at once x {a.threads} thread(s); results {rel(results)}", flush=True)
    return run_sweep(sweep, todo, jobs, a.progress)


if __name__ == "__main__":
    sys.exit(main())
