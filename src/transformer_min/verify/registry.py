"""The check registry: every verifiable claim of the paper, written once, in one explicit order.

`CHECK_MODULES` names the modules of `transformer_min.verify.checks` in the order `tmin verify` runs them; a
new check module is one more name there. Each module declares its stages (`STAGES`, a tuple of `base.Stage`)
and marks its checks with `@base.register`; the registry imports the modules on first use, in this order, and
collects both. `tmin verify` runs the registry stage by stage, `tmin report` renders it, and pytest
parametrises over it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Iterable

from transformer_min.verify.base import (Check, Context, Outcome, Result, Stage, check_of, fmt, register,
                                         run_check)
from transformer_min.core.i18n import tr

__all__ = ["CHECK_MODULES", "STAGES", "Check", "Context", "Outcome", "Result", "Stage", "checks_for", "fmt",
           "load_all", "register", "run_check"]

# The check modules, in running order (their stages print in this order). One line per module.
CHECK_MODULES: tuple[str, ...] = (
    "attention",
    "multihead",
    "positional",
    "position_variants",
    "layers",
    "full",
    "scaling",
    "architecture",
    "masking",
    "ffn",
    "embeddings",
    "regularization",
    "training",
    "decoding",
    "table3",
    "table1",
    "arithmetic",
)
PACKAGE = "transformer_min.verify.checks"


@dataclass(frozen=True)
class Catalog:
    """The loaded registry: stage name -> (title, section) in running order, and every check in order."""

    stages: Mapping[str, tuple[str, str]]
    checks: tuple[Check, ...]


def checks_in(module: ModuleType) -> list[Check]:
    """The checks defined in `module` (functions marked by `register`, also inside a module-level tuple),
    in definition order; a check imported from another module is not counted twice."""
    found = []
    for value in vars(module).values():
        for obj in value if isinstance(value, tuple) else (value,):
            check = check_of(obj)
            if check is not None and check.func.__module__ == module.__name__:
                found.append(check)
    return found


def collect(modules: Iterable[ModuleType]) -> Catalog:
    """Stages and checks of `modules`, in order; a duplicate id or an undeclared stage is an error."""
    stages: dict[str, tuple[str, str]] = {}
    checks: list[Check] = []
    for module in modules:
        for s in getattr(module, "STAGES", ()):
            stages.setdefault(s.name, (s.title, s.section))
        for check in checks_in(module):
            if any(c.id == check.id for c in checks):
                raise ValueError(tr("check {id!r} registered twice").format(id=check.id))
            if check.stage not in stages:
                raise ValueError(tr("check {id}: unknown stage {stage!r}; declare it in {name}.STAGES").format(id=check.id, stage=check.stage, name=module.__name__))
            checks.append(check)
    return Catalog(MappingProxyType(stages), tuple(checks))


@functools.cache
def catalog() -> Catalog:
    """Import the modules of CHECK_MODULES in order (once) and collect their stages and checks."""
    return collect(importlib.import_module(f"{PACKAGE}.{name}") for name in CHECK_MODULES)


class StageTable(Mapping):
    """Read-only view: stage name -> (title, section), in running order; loads the registry on first use."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        return catalog().stages[name]

    def __iter__(self) -> Iterator[str]:
        return iter(catalog().stages)

    def __len__(self) -> int:
        return len(catalog().stages)


STAGES: Mapping[str, tuple[str, str]] = StageTable()


def load_all() -> list[Check]:
    """Every check, in CHECK_MODULES order."""
    return list(catalog().checks)


def checks_for(stages: Iterable[str] | None = None) -> list[Check]:
    """The checks of `stages` (all when None or empty), stage by stage in the order given."""
    all_checks = load_all()
    if not stages:
        return all_checks
    wanted = list(stages)
    return [c for s in wanted for c in all_checks if c.stage == s]
