"""The run's metrics.jsonl as page data: loss, the learning rate against eq. (3) (section 5.3), the
evaluations (val BLEU for translation, exact-match accuracy for copy/reverse) and tokens per second."""

from __future__ import annotations

import json
from pathlib import Path

from transformer_min.core.config import Config
from transformer_min.core.i18n import tr
from transformer_min.training.schedule import rate


def read_records(run_dir: Path) -> list[dict]:
    """metrics.jsonl's records; a line cut by a kill is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            out.append(rec)
    return out


def series(records: list[dict], key: str) -> list[list[float]]:
    """[[step, value], ...] of the records that hold a number under `key`."""
    return [[r["step"], float(r[key])] for r in records
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def curves(cfg: Config, run_dir: Path | None) -> dict:
    """{"available": bool, "loss", "lr", "lr_eq3", "tokens_per_s", "evals": {name: series}, "note"}.

    lr_eq3 is eq. (3) at the logged steps: lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    records = [] if run_dir is None else read_records(run_dir)
    steps = [r for r in records if "loss" in r]
    if not steps:
        where = (tr("no run folder") if run_dir is None
                 else tr("no training records in {path}").format(path=Path(run_dir) / "metrics.jsonl"))
        return {"available": False, "note": tr("{where}: pass --checkpoint runs/<name> to see a run's curves").format(
            where=where)}
    t = cfg.train
    eq3 = [[r["step"], rate(r["step"], cfg.model.d_model, t.warmup_steps, t.lr_factor)] for r in steps
           if r["step"] >= 1]
    evals = {k: series(records, k) for k in ("eval_val_bleu", "eval_accuracy", "eval_val_nll")}
    return {"available": True, "loss": series(steps, "loss"), "lr": series(steps, "lr"), "lr_eq3": eq3,
            "tokens_per_s": series(steps, "tokens_per_s"), "evals": {k: v for k, v in evals.items() if v},
            "warmup_steps": t.warmup_steps, "lr_factor": t.lr_factor, "d_model": cfg.model.d_model}
