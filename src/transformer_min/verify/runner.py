"""Run checks and print them the way a reader holds them against the paper."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, TextIO

from transformer_min.core.i18n import claim, tr
from transformer_min.verify.registry import STAGES, Check, Context, Outcome, checks_for, run_check
from transformer_min.verify.summary import summarize


def stage_heading(stage: str) -> str:
    title, section = STAGES[stage]
    return tr("== {stage}: {title} (section {section}) ==").format(stage=stage, title=tr(title), section=section)


def verdict(passed: bool, skipped: bool = False) -> str:
    return tr("SKIP") if skipped else tr("PASS") if passed else tr("FAIL")


def verdict_line(o: Outcome) -> str:
    """`[PASS] id (section): claim -- measured ...; expected ...` (the claim translated, English quoted beside);
    `[SKIP] id (section): claim -- not run: reason` for a check that did not run."""
    c = o.check
    if o.skipped:
        detail = tr("not run: {reason}").format(reason=o.result.skipped)
    else:
        detail = o.error or tr("measured {measured}; expected {expected}").format(
            measured=o.result.measured, expected=o.result.expected)
    return f"[{verdict(o.passed, o.skipped)}] {c.id} ({c.section}): {claim(c.claim)} -- {detail}"


def summary_line(outcomes: list[Outcome]) -> str:
    """`N passed, M failed` and, apart, `K skipped (not run)`: a skipped check is never counted as a pass
    (the one count of every surface, `verify.summary.summarize`)."""
    return summarize(outcomes).line()


def run_stages(ctx: Context, stages: Iterable[str], out: TextIO, csv_dir: Path | None = None) -> list[Outcome]:
    """Run the named stages in registry order, printing each check's lines and a PASS/FAIL line.

    With `csv_dir`, every matrix a check returns is written there as `<stage>_<name>.csv` (rows = queries).
    A stage whose every check skipped says so: nothing of it was verified.
    """
    outcomes = []
    stages = list(stages)
    for stage in [s for s in STAGES if s in stages]:
        print("\n" + stage_heading(stage), file=out)
        ran = _run_stage(ctx, stage, out, csv_dir)
        outcomes += ran
        if ran and all(o.skipped for o in ran):
            print(tr("(stage {stage}: every check was skipped; nothing of it was verified)").format(stage=stage),
                  file=out)
    print("\n" + summary_line(outcomes), file=out)
    return outcomes


def _run_stage(ctx: Context, stage: str, out: TextIO, csv_dir: Path | None) -> list[Outcome]:
    from transformer_min.core.matrix_csv import write_matrices

    outcomes = []
    for check in checks_for([stage]):
        o = run_check(check, ctx)
        outcomes.append(o)
        for line in o.result.lines:
            print(f"  {line}", file=out)
        if csv_dir is not None and o.result.matrices:
            written = write_matrices(csv_dir, stage, o.result.matrices)
            print("  " + tr("{n} matrix CSV files (rows = queries, columns = keys): {first} ... {last}").format(
                n=len(written), first=written[0], last=written[-1].name), file=out)
        print(verdict_line(o), file=out)
    return outcomes


def print_list(checks: list[Check]) -> None:
    for c in checks:
        print(f"{c.stage:11s} {c.id:48s} {c.tag:6s} {c.section:18s} {c.code}")
