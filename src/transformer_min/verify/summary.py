"""One count of verdicts for every surface (issue 38): the last line of `tmin verify`, the terminal line of
`tmin report`, report.md / report.html's verdict line, stage headings and tag table, and whatever else counts
checks (Table 3's retrained conclusions, the explorer) call `summarize` too.

A SKIP (a check that did not run) is counted apart: never as a PASS, never as a FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from transformer_min.core.i18n import tr

VERDICTS = ("PASS", "FAIL", "SKIP")


@dataclass(frozen=True)
class Summary:
    """The names of the passed, failed and skipped items, in the order given."""

    passed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)

    @property
    def ok(self) -> bool:
        """No failure (a run of skips only is not a failure, and not a pass either: see `line`)."""
        return not self.failed

    def line(self) -> str:
        """`3 passed, 0 failed, 2 skipped (not run)` (`tmin verify`'s last line); the skips only when there are."""
        text = tr("{passed} passed, {failed} failed").format(passed=len(self.passed), failed=len(self.failed))
        if self.skipped:
            text += tr(", {skipped} skipped (not run)").format(skipped=len(self.skipped))
        return text

    def claims_line(self) -> str:
        """`3/5 claims PASS, 2 SKIP (not run)` (the report's verdict line, on every surface)."""
        counts = {"passed": len(self.passed), "n": self.total, "failed": len(self.failed)}
        if self.failed:
            text = tr("{passed}/{n} claims PASS, {failed} FAIL").format(**counts)
        else:
            text = tr("{passed}/{n} claims PASS").format(**counts)
        if self.skipped:
            text += tr(", {skipped} SKIP (not run)").format(skipped=len(self.skipped))
        return text

    def as_dict(self) -> dict:
        """The counts and the names of what failed or was skipped, for JSON (the explorer, a sweep record)."""
        return {"passed": len(self.passed), "failed": len(self.failed), "skipped": len(self.skipped),
                "total": self.total, "failed_ids": list(self.failed), "skipped_ids": list(self.skipped)}


def _name_and_verdict(item) -> tuple[str, str]:
    if isinstance(item, tuple):
        name, verdict = item
    else:  # a verify Outcome: its check's id and its PASS / FAIL / SKIP
        name, verdict = item.check.id, item.verdict
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} of {name!r} is not one of {', '.join(VERDICTS)}")
    return str(name), verdict


def summarize(items: Iterable) -> Summary:
    """The Summary of `items`: verify Outcomes, or (name, verdict) pairs with verdict "PASS", "FAIL" or "SKIP"."""
    names: dict[str, list[str]] = {v: [] for v in VERDICTS}
    for item in items:
        name, verdict = _name_and_verdict(item)
        names[verdict].append(name)
    return Summary(tuple(names["PASS"]), tuple(names["FAIL"]), tuple(names["SKIP"]))
