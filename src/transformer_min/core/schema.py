"""Parsed TOML/JSON tables -> frozen dataclasses, with type checks and "did you mean" for unknown keys.

Every error names the key path (`model.num_heads`) so the message says which field to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import types
import typing
from typing import Any, Literal

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr

log = logging.getLogger("transformer_min.core.config")
_NOTES_SHOWN: set[str] = set()


def fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def note(message: str) -> None:
    """Log a one-line note (an alias read, a non-paper head size) once per process: a config file is
    often read more than once by one command."""
    if message not in _NOTES_SHOWN:
        _NOTES_SHOWN.add(message)
        log.warning("%s", tr("note: {message}").format(message=message))


def unknown_keys_error(where: str, problems: list[tuple[str, str]]) -> ConfigError:
    """One error for every unknown key at once. `problems` are (what, fix) pairs such as
    ("model.d_modle: unknown key", "did you mean 'd_model'?")."""
    if len(problems) == 1:
        return ConfigError(tr("{where}{what}; {fix}").format(where=where, what=problems[0][0], fix=problems[0][1]))
    listed = "; ".join(f"{what} -> {fix}" for what, fix in problems)
    return ConfigError(tr("{where}{n_problems} unknown keys, fix each: {listed}").format(where=where, n_problems=len(problems), listed=listed))


def divisors(n: int, limit: int = 64) -> list[int]:
    """The divisors of n up to `limit`: the head counts h that split d_model evenly (section 3.2.2)."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def suggest(name: str, known: list[str]) -> str:
    return "; " + hint(name, known)


def hint(name: str, known: list[str], label: str = "known keys") -> str:
    """`did you mean 'x'?` for the nearest known name, else the list of known names."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    if close:
        return tr("did you mean {name!r}?").format(name=close[0])
    return tr("{label}: {names}").format(label=tr(label), names=", ".join(sorted(known)))


def _coerce(path: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(path, value, inner[0])
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise fail(path, tr("{value!r} is not one of {items}").format(value=value, items=', '.join((repr(c) for c in choices))))
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise fail(path, tr("expected a list of {n_args} numbers, got {value!r}").format(n_args=len(args), value=value))
        return tuple(_coerce(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    if tp is bool:
        if not isinstance(value, bool):
            raise fail(path, tr("expected true or false, got {value!r}").format(value=value))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(path, tr("expected an integer, got {value!r}").format(value=value))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(path, tr("expected a number, got {value!r}").format(value=value))
        if not math.isfinite(value):
            raise fail(path, tr("must be a finite number, got {value!r}; fix: give a number such as 0.1").format(value=value))
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise fail(path, tr("expected a string, got {value!r}").format(value=value))
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise fail(path, tr("expected a table, got {value!r}").format(value=value))
        return dict(value)
    return value


def from_dict(cls: type, data: dict, path: str) -> Any:
    """Build dataclass `cls` from `data`, naming `path.key` in every error."""
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else key
        if key not in known:
            raise fail(full, tr("unknown key{suggest}").format(suggest=suggest(key, known)))
        kwargs[key] = _coerce(full, value, hints[key])
    return cls(**kwargs)
