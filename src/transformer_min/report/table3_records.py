"""The records of a Table 3 sweep (benchmarks/table3.py), read and checked: FOLDER/sweep.json, the 1x runs of
FOLDER/results/*.json and the longer budgets of FOLDER/budgets/*.json. A damaged file is a DataError that
names it and the fix."""

from __future__ import annotations

import json
from pathlib import Path

from transformer_min.core.errors import DataError
from transformer_min.core.i18n import tr
from transformer_min.report import table3_plan as plan

SHOWN = ("val_ppl", "val_bleu", "test_bleu", "params")
NEEDED = ("row", "seed", "updates", "tokens_per_update", *SHOWN)
NUMBERS = ("updates", "tokens_per_update", *SHOWN)  # a record's fields that must be numbers
BUDGETS_DIR = "budgets"  # FOLDER/budgets/<run>_u<updates>.json: a longer run measured at each budget (--long)


def read_manifest(folder: str | Path) -> dict | None:
    """FOLDER/sweep.json as a dict (None where there is none); a damaged one is a DataError naming the fix."""
    path = Path(folder) / "sweep.json"
    if not path.exists():
        return None
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(got, dict):
            raise TypeError("not a JSON object")
        return got
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as e:
        raise bad_manifest(folder, e) from None


def bad_manifest(folder: str | Path, e: Exception) -> DataError:
    return DataError(tr("{path}: not a sweep's manifest ({reason}); fix: delete it (the next "
                        "`python benchmarks/table3.py --results {folder}` writes it again), or pass the results "
                        "folder the sweep wrote").format(path=Path(folder) / "sweep.json",
                                                         reason=f"{type(e).__name__}: {e}", folder=folder))


def read_record(path: Path, needed: tuple[str, ...] = NEEDED) -> dict:
    """One run's record, checked: readable JSON, every needed field there and of its type, a row of Table 3."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(tr("{path}: not a readable result ({reason}); fix: delete it and rerun the sweep, "
                           "which redoes that run's evaluation").format(path=path, reason=e)) from None
    missing = [k for k in needed if not isinstance(rec, dict) or k not in rec]
    if missing:
        raise DataError(tr("{path}: lacks {missing}; fix: delete it and rerun the sweep").format(
            path=path, missing=", ".join(missing)))
    wrong = [k for k in needed if k in NUMBERS or k in ("seed", "budget")
             if isinstance(rec[k], bool) or not isinstance(rec[k], (int, float)) or rec[k] != rec[k]]
    wrong += [k for k in ("row",) if not isinstance(rec[k], str)]
    if wrong:
        raise DataError(tr("{path}: {fields} of the wrong type (a number, and the row a name, expected); fix: "
                           "delete it and rerun the sweep").format(path=path, fields=", ".join(wrong)))
    if not any(rec["row"] == v.row for v in plan.VARIANTS):
        raise DataError(tr("{path}: row {row!r} is not a row of Table 3 ({rows}); fix: delete the file, or rerun the "
                           "sweep, which writes the row's name").format(
            path=path, row=rec["row"][:80], rows=", ".join(v.row for v in plan.VARIANTS)))
    return rec


def load_results(folder: str | Path) -> list[dict]:
    """Every finished run of a sweep: FOLDER/results/*.json (benchmarks/table3.py writes one per run)."""
    root = Path(folder)
    where = root / "results"
    if not where.is_dir():
        raise DataError(tr("--table3 {folder}: no results/ folder there; fix: pass the results folder of "
                           "`python benchmarks/table3.py` (default runs/table3)").format(folder=folder))
    rows = [read_record(path) for path in sorted(where.glob("*.json"))]
    if not rows:
        raise DataError(tr("--table3 {folder}: results/ holds no finished run yet; fix: run "
                           "`python benchmarks/table3.py --results {folder}` first").format(folder=folder))
    budgets = {(r["updates"], r.get("batch_tokens"), r.get("device")) for r in rows}
    if len(budgets) > 1:
        raise DataError(tr("--table3 {folder}: runs of different budgets {budgets} are mixed; fix: keep one sweep "
                           "(one --steps, --batch-tokens and --device) per results folder").format(
            folder=folder, budgets=sorted(map(str, budgets))))
    return rows


def load_budgets(folder: str | Path) -> list[dict]:
    """The longer runs of `benchmarks/table3.py --long`: FOLDER/budgets/*.json, one record per run and budget
    point ([] where there are none). Each record's budget is its update count."""
    where = Path(folder) / BUDGETS_DIR
    if not where.is_dir():
        return []
    rows = [read_record(path, (*NEEDED, "budget")) for path in sorted(where.glob("*_u*.json"))]
    for r, path in zip(rows, sorted(where.glob("*_u*.json"))):
        if r["budget"] != r["updates"]:
            raise DataError(tr("{path}: budget {budget} but {updates} updates; fix: delete it and rerun the sweep "
                               "with --long, which measures that point again").format(
                path=path, budget=r["budget"], updates=r["updates"]))
    return rows
