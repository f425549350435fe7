"""Text measured in terminal columns: a CJK character (East Asian Wide or Fullwidth) takes two, so labels padded
with `str.ljust` drift under `--lang zh`. `pad` aligns a label column and `wrap` wraps a line by columns,
breaking between CJK characters as well as at spaces."""

from __future__ import annotations

import re
import unicodedata

# A wide character with the closing punctuation that must not start a line; a run of other non-spaces; spaces.
_TOKEN = re.compile(r"[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]"
                    r"[，。；：、！？）」』》〉】,.;:!?)]*|[^\s\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff"
                    r"\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]+|\s+")


def width(text: str) -> int:
    """Terminal columns of `text`: 2 for East Asian Wide and Fullwidth characters, 0 for combining marks, else 1."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def pad(text: str, columns: int) -> str:
    """`text` and spaces up to `columns` terminal columns (as `str.ljust`, counted in columns)."""
    return text + " " * max(0, columns - width(text))


def wrap(text: str, columns: int) -> list[str]:
    """`text` (whitespace collapsed) in lines of at most `columns` terminal columns (a longer word stays whole)."""
    lines: list[str] = []
    line, used = "", 0
    for token in _TOKEN.findall(" ".join(text.split())):
        w = width(token)
        if token.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        if line and used + w > columns:
            lines.append(line.rstrip())
            line, used = "", 0
        line, used = line + token, used + w
    if line.strip():
        lines.append(line.rstrip())
    return lines
