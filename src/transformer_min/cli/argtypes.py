"""argparse types for numeric flags: reject what the config would reject (0 beams, NaN, infinity) at parse time.

argparse turns the ArgumentTypeError into `tmin CMD: error: argument --beam: ...` with exit code 2.
"""

from __future__ import annotations

import argparse
import math

from transformer_min.core.i18n import tr


def positive_int(text: str) -> int:
    """An integer >= 1 (a beam size, a step count, a number of checkpoints)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(tr("expected a positive integer (>= 1: 1, 2, ...), got {text!r}").format(text=text))
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(tr("expected a number, got {text!r}").format(text=text)) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(tr("expected a finite number, got {text!r}").format(text=text))
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (a length penalty alpha; a time budget, where 0 = off)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(tr("expected a number >= 0, got {text!r}").format(text=text))
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a step between alphas)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(tr("expected a number > 0, got {text!r}").format(text=text))
    return value


def path_arg(text: str) -> str:
    """A file or folder path: not empty (an empty --config or --csv would otherwise be read as "not given",
    and an empty --checkpoint as the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(tr("expected a path, got {text!r}; give a file or folder name, "
                                            "or leave the option out").format(text=text))
    return text


def seconds_up_to(limit: float):
    """A finite number of seconds in [0, limit] (0 = off)."""

    def parse(text: str) -> float:
        value = non_negative_float(text)
        if value > limit:
            raise argparse.ArgumentTypeError(tr("expected at most {limit:g} seconds, got {text!r}").format(limit=limit, text=text))
        return value

    parse.__name__ = "seconds"
    return parse
