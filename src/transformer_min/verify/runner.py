"""Run checks and print them the way a reader holds them against the paper."""

from __future__ import annotations

from typing import Iterable, TextIO

from transformer_min.verify.registry import STAGES, Check, Context, Outcome, checks_for, run_check


def run_stages(ctx: Context, stages: Iterable[str], out: TextIO) -> list[Outcome]:
    """Run the named stages in registry order, printing each check's lines and a PASS/FAIL line."""
    outcomes = []
    stages = list(stages)
    for stage in [s for s in STAGES if s in stages]:
        title, section = STAGES[stage]
        print(f"\n== {stage}: {title} (section {section}) ==", file=out)
        for check in checks_for([stage]):
            o = run_check(check, ctx)
            outcomes.append(o)
            for line in o.result.lines:
                print(f"  {line}", file=out)
            status = "PASS" if o.passed else "FAIL"
            detail = o.error or f"measured {o.result.measured}; expected {o.result.expected}"
            print(f"[{status}] {check.id} ({check.section}): {check.claim} -- {detail}", file=out)
    passed = sum(o.passed for o in outcomes)
    print(f"\n{passed} passed, {len(outcomes) - passed} failed", file=out)
    return outcomes


def print_list(checks: list[Check]) -> None:
    for c in checks:
        print(f"{c.stage:11s} {c.id:48s} {c.tag:6s} {c.section:18s} {c.code}")
