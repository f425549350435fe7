"""Short, safe text for error messages: one line, cut at a word, without advice that is not ours to give."""

from __future__ import annotations

import re
import textwrap


def shorten(text: str, width: int = 200) -> str:
    """`text` on one line, cut at a word boundary (never mid-word) when longer than `width`."""
    return textwrap.shorten(" ".join(str(text).split()), width=width, placeholder=" ...")


def reason_without_advice(error: Exception) -> str:
    """torch's reason, minus its advice to load with weights_only=False (never ours to give)."""
    msg = str(error)
    m = re.search(r"WeightsUnpickler error:\s*([^\n]+)", msg)
    reason = m.group(1) if m else msg.strip().split("\n")[0]
    for cut in ("This file can still be loaded", "(1) In PyTorch", "weights_only"):
        reason = reason.split(cut)[0]
    return reason.strip(" ,;:(.") or type(error).__name__
