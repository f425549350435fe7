"""What every check module imports: a claim's result, its metadata, the shared run context.

A check module declares its stages in `STAGES` (a tuple of `Stage`, in running order) and marks each check
function with `@register(...)`. The decorator only attaches a `Check` to the function; nothing global changes
at import. `verify.registry` collects the checks from the modules named in `CHECK_MODULES`, in that order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from transformer_min.core.config import Config
from transformer_min.core.i18n import tr

TAGS = ("EXACT", "STAT", "ARCH", "ARITH")  # PAPER.md: how a claim is checked


@dataclass
class Result:
    """What a check measured against what the paper expects; `lines` are printed for the reader, and
    `matrices` (name -> printing.Matrix) are what `--csv DIR` writes, one file per name."""

    passed: bool
    measured: str
    expected: str
    lines: list[str] = field(default_factory=list)
    matrices: dict[str, Any] = field(default_factory=dict)
    skipped: str = ""  # non-empty: the check did not run, and why (printed SKIP, never counted as a pass)

    @classmethod
    def skip(cls, reason: str, lines: list[str] | None = None) -> "Result":
        """A check that could not run here (a config the comparison does not apply to): neither pass nor fail."""
        return cls(False, reason, "n/a", list(lines or []), skipped=reason)


class Stage(NamedTuple):
    """A group of checks run and printed together: `== name: title (section ...) ==`."""

    name: str
    title: str
    section: str


@dataclass(frozen=True)
class Check:
    """One claim: `func(ctx) -> Result`."""

    id: str
    stage: str
    section: str
    claim: str
    tag: str  # EXACT, STAT, ARCH or ARITH (PAPER.md)
    code: str  # module.function that implements the claim
    func: Callable[["Context"], Result]


@dataclass
class Outcome:
    check: Check
    result: Result
    seconds: float
    error: str | None = None

    @property
    def skipped(self) -> bool:
        return self.error is None and bool(self.result.skipped)

    @property
    def passed(self) -> bool:
        return self.error is None and self.result.passed and not self.result.skipped

    @property
    def failed(self) -> bool:
        return not self.passed and not self.skipped

    @property
    def verdict(self) -> str:
        """PASS, FAIL or SKIP (English: the report's and the log's word; the screen translates it)."""
        return "PASS" if self.passed else "SKIP" if self.skipped else "FAIL"


class Context:
    """Shared state for one run: the config, and values computed once and reused by checks."""

    def __init__(self, cfg: Config | None = None):
        self.cfg = cfg or Config()
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, fn: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]


CHECK_ATTRIBUTE = "paper_check"  # where `register` puts a function's Check


def register(id: str, stage: str, section: str, claim: str, tag: str, code: str):
    """Decorator: mark `func(ctx) -> Result` as the check `id` of `stage` (the registry collects it from its
    module's namespace; the function itself is returned unchanged)."""
    if tag not in TAGS:
        raise ValueError(tr("check {id}: tag must be EXACT, STAT, ARCH or ARITH, got {tag!r}").format(id=id, tag=tag))

    def wrap(func: Callable[[Context], Result]) -> Callable[[Context], Result]:
        setattr(func, CHECK_ATTRIBUTE, Check(id, stage, section, claim, tag, code, func))
        return func

    return wrap


def check_of(obj: Any) -> Check | None:
    """The Check that `register` attached to `obj`, or None."""
    found = getattr(obj, CHECK_ATTRIBUTE, None)
    return found if isinstance(found, Check) else None


def run_check(check: Check, ctx: Context) -> Outcome:
    """Run one check; an exception is a FAIL with the error text, never a crash of the run."""
    t0 = time.perf_counter()
    try:
        result = check.func(ctx)
        error = None
    except Exception as e:  # noqa: BLE001 - a raising check is a failing check
        result = Result(False, "error", tr("no error"), [])
        error = f"{type(e).__name__}: {e}"
    return Outcome(check, result, time.perf_counter() - t0, error)


def fmt(x: float, digits: int = 3) -> str:
    """Short number formatting for measured/expected columns."""
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{digits}e}"
    return f"{x:.{digits + 1}g}"
