"""Table 3 retrained at small scale (benchmarks/table3.py): per row the seeds' mean and spread, the change
from the base beside the paper's, and a verdict on the paper's direction.

The rule (the same in `python benchmarks/table3.py table DIR`, `tmin report --table3 DIR` and docs/results.md):
- noise = the larger seed spread (max - min) of the row and of the base;
- the paper's change is "no change" when it is within its own print resolution (0.1 BLEU, 0.01 PPL);
- agrees: our change is beyond the noise and in the paper's direction; opposite: beyond it, the other way;
  within noise: |our change| <= noise; differs: beyond the noise where the paper shows no change;
  noise unknown: fewer than 2 seeds on either side.
The paper's conclusion holds where the verdict is "agrees", or "within noise" where the paper shows no
change (row E's "nearly identical"); anything else is "not reproduced at this scale", never a failure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from transformer_min.core.config import Config, config_from_dict
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.report import table3_plan as plan
from transformer_min.report.table3_records import (BUDGETS_DIR, NEEDED, SHOWN, bad_manifest,  # noqa: F401
                                                    load_budgets, load_results, read_manifest, read_record)
from transformer_min.verify.checks import table3 as t3

JUDGED = ("val_ppl", "val_bleu")  # the paper's two measured columns (dev set, no averaging)
FLAT = {"val_ppl": 0.01, "val_bleu": 0.1}  # the paper prints PPL to 0.01 and BLEU to 0.1
PAPER_COLUMN = {"val_ppl": "ppl", "val_bleu": "bleu"}

AGREES, WITHIN, OPPOSITE, DIFFERS, UNKNOWN = ("agrees", "within noise", "opposite",
                                             "differs (paper: no change)", "noise unknown")


@dataclass(frozen=True)
class Stat:
    """One metric of one row over its seeds."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.mean(self.values)

    @property
    def spread(self) -> float:
        return max(self.values) - min(self.values)


@dataclass(frozen=True)
class Judged:
    """One row's change from the base in one metric: the paper's, ours, the noise and the verdict."""

    row: str
    metric: str
    paper: float
    paper_delta: float
    ours: Stat
    ours_delta: float
    noise: float | None
    verdict: str

    @property
    def paper_flat(self) -> bool:
        return is_flat(self.paper_delta, self.metric)

    @property
    def holds(self) -> bool:
        """The paper's conclusion holds at this scale (beyond noise; "no change" within it)."""
        return self.verdict == AGREES or (self.paper_flat and self.verdict == WITHIN)


def verdict(paper_delta: float, ours_delta: float, noise: float | None, flat: float) -> str:
    """The rule of the module docstring; `noise` None = fewer than 2 seeds somewhere."""
    if noise is None:
        return UNKNOWN
    if abs(ours_delta) <= noise + 1e-12:
        return WITHIN
    if abs(paper_delta) <= flat + 1e-9:
        return DIFFERS
    return AGREES if (ours_delta > 0) == (paper_delta > 0) else OPPOSITE


def paper_value(row: str, metric: str) -> float:
    return getattr(plan.variant(row), PAPER_COLUMN[metric])


def paper_change(row: str, metric: str) -> float:
    """The paper's change from its base in `metric` for `row`."""
    return paper_value(row, metric) - paper_value(plan.BASE.row, metric)


def is_flat(paper_delta: float, metric: str) -> bool:
    """The paper prints no change: within its print resolution (FLAT)."""
    return abs(paper_delta) <= FLAT[metric] + 1e-9


def load_planned(folder: str | Path) -> dict[str, float] | None:
    """{row: parameters in millions} of every row, from the base the sweep wrote to FOLDER/sweep.json;
    None where the folder has no sweep.json (records copied on their own)."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    try:
        return planned_millions(config_from_dict(manifest["base"], str(Path(folder) / "sweep.json")))
    except (KeyError, TypeError, ConfigError) as e:
        raise bad_manifest(folder, e) from None


@dataclass(frozen=True)
class Sweep:
    """A results folder read: its finished runs and, from its sweep.json, every row's planned size (or None)."""

    results: list[dict]
    planned: dict[str, float] | None = None
    budgets: list[dict] = ()  # the longer runs' points (FOLDER/budgets/), each with its "budget"


def load_sweep(folder: str | Path) -> Sweep:
    """FOLDER/results/*.json, FOLDER/sweep.json and FOLDER/budgets/*.json, all checked
    (`tmin report --table3 FOLDER`)."""
    return Sweep(load_results(folder), load_planned(folder), load_budgets(folder))


def stats(results: list[dict]) -> dict[str, dict[str, Stat]]:
    """{row: {metric: Stat over its seeds}} in the paper's row order."""
    out: dict[str, dict[str, Stat]] = {}
    for v in plan.VARIANTS:
        mine = sorted((r for r in results if r["row"] == v.row), key=lambda r: r["seed"])
        if mine:
            out[v.row] = {m: Stat(tuple(float(r[m]) for r in mine)) for m in SHOWN}
    return out


def judge(by_row: dict[str, dict[str, Stat]]) -> list[Judged]:
    """Every measured non-base row against the measured base, in both judged metrics."""
    base = by_row.get(plan.BASE.row)
    if base is None:
        return []
    out = []
    for row, got in by_row.items():
        if row == plan.BASE.row:
            continue
        for m in JUDGED:
            noise = max(got[m].spread, base[m].spread) if min(got[m].n, base[m].n) >= 2 else None
            paper = paper_value(row, m)
            paper_delta = paper_change(row, m)
            ours_delta = got[m].mean - base[m].mean
            out.append(Judged(row, m, paper, paper_delta, got[m], ours_delta, noise,
                              verdict(paper_delta, ours_delta, noise, FLAT[m])))
    return out


def budget(results: list[dict]) -> dict:
    """The sweep's budget: updates, mean target tokens per update, batch_tokens, device."""
    r = results[0]
    return {"updates": r["updates"], "tokens_per_update": statistics.mean(x["tokens_per_update"] for x in results),
            "batch_tokens": r.get("batch_tokens"), "device": r.get("device", "cpu")}


def _ms(s: Stat, digits: int) -> str:
    """mean ± half the spread (n seeds)."""
    return f"{s.mean:.{digits}f} ± {s.spread / 2:.{digits}f}" if s.n > 1 else f"{s.mean:.{digits}f}"


HEADERS = ["row", "ours", "seeds", "paper PPL", "paper BLEU", "paper params (M)", "val PPL", "val BLEU",
           "test BLEU", "params (M)", "Δ PPL paper / ours", "Δ BLEU paper / ours", "PPL verdict", "BLEU verdict"]


def planned_millions(base: Config) -> dict[str, float]:
    """{row: parameters in millions} of every variant derived from `base` (counted on the meta device)."""
    return {v.row: t3.count(plan.apply(base, plan.changes(v, base)).model, base.vocab.src_size) / 1e6
            for v in plan.VARIANTS}


def table_rows(results: list[dict], planned: dict[str, float] | None = None) -> list[list[str]]:
    """One row per measured Table 3 row (HEADERS); the base row's deltas and verdicts are blank.

    With `planned` ({row: parameters in millions}, `planned_millions`), every row of the paper's table is
    listed, in its order: those with no finished run yet say so in our columns, beside the paper's.
    """
    by_row = stats(results)
    judged = {(j.row, j.metric): j for j in judge(by_row)}
    rows = []
    for v in plan.VARIANTS:
        row = v.row
        if row not in by_row:
            if planned is not None:
                rows.append(_not_yet_run(v, planned[row]))
            continue
        got = by_row[row]
        cells = [row, v.mapping, str(got["val_ppl"].n), f"{v.ppl:.2f}", f"{v.bleu:.1f}",
                 str(t3.row(row).paper_millions), _ms(got["val_ppl"], 2), _ms(got["val_bleu"], 2),
                 _ms(got["test_bleu"], 2), f"{got['params'].mean / 1e6:.2f}"]
        for m, digits in (("val_ppl", 2), ("val_bleu", 2)):
            j = judged.get((row, m))
            cells.append(f"{j.paper_delta:+.{digits}f} / {j.ours_delta:+.{digits}f}" if j else "")
        cells += [judged[(row, m)].verdict if (row, m) in judged else "" for m in JUDGED]
        rows.append(cells)
    return rows


def _not_yet_run(v: plan.Variant, millions: float) -> list[str]:
    """A row of the sweep with no finished run: the paper's side filled in, ours marked."""
    no = tr("not yet run")
    paper = [v.row, v.mapping, "0", f"{v.ppl:.2f}", f"{v.bleu:.1f}", str(t3.row(v.row).paper_millions)]
    ours = [no, no, no, f"{millions:.2f}"]
    if v is plan.BASE:  # no change from itself to show
        return paper + ours + ["", "", "", ""]
    deltas = [f"{paper_change(v.row, m):+.2f} / {no}" for m in JUDGED]
    return paper + ours + deltas + [no, no]


def format_text(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *rows])


def format_markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows])
