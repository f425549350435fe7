"""Parsed TOML/JSON tables -> frozen dataclasses, with type checks and "did you mean" for unknown keys.

Every error names the key path (`model.num_heads`) so the message says which field to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal

from transformer_min.errors import ConfigError


def fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"


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
            raise fail(path, f"{value!r} is not one of {', '.join(repr(c) for c in choices)}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise fail(path, f"expected a list of {len(args)} numbers, got {value!r}")
        return tuple(_coerce(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    if tp is bool:
        if not isinstance(value, bool):
            raise fail(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise fail(path, f"expected a string, got {value!r}")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise fail(path, f"expected a table, got {value!r}")
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
            raise fail(full, f"unknown key{suggest(key, known)}")
        kwargs[key] = _coerce(full, value, hints[key])
    return cls(**kwargs)
