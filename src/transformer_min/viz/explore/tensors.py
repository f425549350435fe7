"""Matrices as page data: float32, little-endian, base64 (the page shows every value exactly as float32,
including -inf where a mask removed a score); a request's parameters, checked."""

from __future__ import annotations

import base64
from typing import Sequence

import numpy as np
from torch import Tensor

from transformer_min.core.errors import TminError
from transformer_min.core.i18n import tr


class ExploreInputError(TminError):
    """A request or option the page cannot serve (the message names the field and the fix): HTTP 400."""


def pack(t: Tensor) -> dict:
    """A tensor -> {"shape": [...], "b64": float32 little-endian bytes in base64}."""
    a = np.ascontiguousarray(t.detach().float().cpu().numpy(), dtype="<f4")
    return {"shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def unpack(m: dict) -> np.ndarray:
    """The inverse of `pack` (tests read the page's data with it)."""
    return np.frombuffer(base64.b64decode(m["b64"]), dtype="<f4").reshape(m["shape"])


def int_param(query: dict, name: str, default: int, choices: Sequence[int] | None = None,
              low: int = 0, high: int | None = None) -> int:
    """An integer query parameter, in `choices` or in [low, high]; else an ExploreInputError naming it."""
    raw = query.get(name, [str(default)])[-1]
    try:
        value = int(raw)
    except ValueError:
        raise ExploreInputError(tr("{name}: expected an integer, got {raw!r}").format(name=name, raw=raw)) from None
    if choices is not None and value not in choices:
        raise ExploreInputError(tr("{name} = {value}: choose one of {items}").format(name=name, value=value, items=', '.join(map(str, choices))))
    if choices is None and (value < low or (high is not None and value > high)):
        raise ExploreInputError(tr("{name} = {value}: out of range; choose {low}..{high}").format(name=name, value=value, low=low, high=high))
    return value


def flag_param(query: dict, name: str, default: bool) -> bool:
    """A 0/1 (or true/false) query parameter."""
    raw = query.get(name, ["1" if default else "0"])[-1].lower()
    if raw not in ("0", "1", "true", "false"):
        raise ExploreInputError(tr("{name}: expected 0 or 1, got {raw!r}").format(name=name, raw=raw))
    return raw in ("1", "true")


def choice_param(query: dict, name: str, default: str, choices: Sequence[str]) -> str:
    raw = query.get(name, [default])[-1]
    if raw not in choices:
        raise ExploreInputError(tr("{name} = {raw!r}: choose one of {items}").format(name=name, raw=raw, items=', '.join(choices)))
    return raw
