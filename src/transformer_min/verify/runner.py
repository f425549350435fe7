"""Run checks and print them the way a reader holds them against the paper."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, TextIO

from transformer_min.core.i18n import claim, tr
from transformer_min.verify.registry import STAGES, Check, Context, Outcome, checks_for, run_check


def stage_heading(stage: str) -> str:
    title, section = STAGES[stage]
    return tr("== {stage}: {title} (section {section}) ==").format(stage=stage, title=tr(title), section=section)


def verdict(passed: bool) -> str:
    return tr("PASS") if passed else tr("FAIL")


def verdict_line(o: Outcome) -> str:
    """`[PASS] id (section): claim -- measured ...; expected ...` (the claim translated, English quoted beside)."""
    c = o.check
    detail = o.error or tr("measured {measured}; expected {expected}").format(
        measured=o.result.measured, expected=o.result.expected)
    return f"[{verdict(o.passed)}] {c.id} ({c.section}): {claim(c.claim)} -- {detail}"


def summary_line(outcomes: list[Outcome]) -> str:
    passed = sum(o.passed for o in outcomes)
    return tr("{passed} passed, {failed} failed").format(passed=passed, failed=len(outcomes) - passed)


def run_stages(ctx: Context, stages: Iterable[str], out: TextIO, csv_dir: Path | None = None) -> list[Outcome]:
    """Run the named stages in registry order, printing each check's lines and a PASS/FAIL line.

    With `csv_dir`, every matrix a check returns is written there as `<stage>_<name>.csv` (rows = queries).
    """
    from transformer_min.core.matrix_csv import write_matrices

    outcomes = []
    stages = list(stages)
    for stage in [s for s in STAGES if s in stages]:
        print("\n" + stage_heading(stage), file=out)
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
    print("\n" + summary_line(outcomes), file=out)
    return outcomes


def print_list(checks: list[Check]) -> None:
    for c in checks:
        print(f"{c.stage:11s} {c.id:48s} {c.tag:6s} {c.section:18s} {c.code}")
