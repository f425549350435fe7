"""The check registry: every verifiable claim of the paper, written once.

A check is an importable function that carries its paper section and claim. `tmin verify`
runs the registry stage by stage, `tmin report` renders it, and pytest parametrises over it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from transformer_min.core.config import Config


@dataclass
class Result:
    """What a check measured against what the paper expects; `lines` are printed for the reader, and
    `matrices` (name -> printing.Matrix) are what `--csv DIR` writes, one file per name."""

    passed: bool
    measured: str
    expected: str
    lines: list[str] = field(default_factory=list)
    matrices: dict[str, Any] = field(default_factory=dict)


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
    def passed(self) -> bool:
        return self.error is None and self.result.passed


class Context:
    """Shared state for one run: the config, and values computed once and reused by checks."""

    def __init__(self, cfg: Config | None = None):
        self.cfg = cfg or Config()
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, fn: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]


# stage name -> (title, paper section); the order is the order `tmin verify` runs them in.
STAGES: dict[str, tuple[str, str]] = {}
REGISTRY: list[Check] = []


def stage(name: str, title: str, section: str) -> None:
    """Declare a stage (idempotent)."""
    STAGES.setdefault(name, (title, section))


def register(id: str, stage: str, section: str, claim: str, tag: str, code: str):
    """Decorator: add `func(ctx) -> Result` to the registry under `stage`."""
    if tag not in ("EXACT", "STAT", "ARCH", "ARITH"):
        raise ValueError(f"check {id}: tag must be EXACT, STAT, ARCH or ARITH, got {tag!r}")

    def wrap(func: Callable[[Context], Result]) -> Callable[[Context], Result]:
        if any(c.id == id for c in REGISTRY):
            raise ValueError(f"check {id!r} registered twice")
        if stage not in STAGES:
            raise ValueError(f"check {id}: unknown stage {stage!r}; declare it with stage() first")
        REGISTRY.append(Check(id, stage, section, claim, tag, code, func))
        return func

    return wrap


def load_all() -> list[Check]:
    """Import every checks module (registration happens at import) and return the registry."""
    from transformer_min.verify import checks  # noqa: F401

    return list(REGISTRY)


def checks_for(stages: Iterable[str] | None = None) -> list[Check]:
    all_checks = load_all()
    if not stages:
        return all_checks
    wanted = list(stages)
    return [c for s in wanted for c in all_checks if c.stage == s]


def run_check(check: Check, ctx: Context) -> Outcome:
    """Run one check; an exception is a FAIL with the error text, never a crash of the run."""
    t0 = time.perf_counter()
    try:
        result = check.func(ctx)
        error = None
    except Exception as e:  # noqa: BLE001 - a raising check is a failing check
        result = Result(False, "error", "no error", [])
        error = f"{type(e).__name__}: {e}"
    return Outcome(check, result, time.perf_counter() - t0, error)


def fmt(x: float, digits: int = 3) -> str:
    """Short number formatting for measured/expected columns."""
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{digits}e}"
    return f"{x:.{digits + 1}g}"


def replace_result(result: Result, **changes: Any) -> Result:
    return dataclasses.replace(result, **changes)
