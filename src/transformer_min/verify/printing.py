"""How every stage prints tensors: one rounding rule, one cut rule, said out loud when applied.

- Attention weights and other probabilities: 4 decimals (post 000 prints its head-0 matrix rounded to 4).
- Row sums: 6 decimals (post 000 prints them rounded to 6).
- A matrix prints whole up to MAX_SHOWN rows and columns; a bigger one prints its top-left
  MAX_SHOWN x MAX_SHOWN block under a heading that says so and points to `--csv DIR` for the whole matrix.
"""

from __future__ import annotations

from transformer_min.core.i18n import tr
from transformer_min.core.matrix_csv import Matrix

DIGITS = 4
SUM_DIGITS = 6
MAX_SHOWN = 16


def weight_matrix(m) -> Matrix:
    """A (Lq, Lk) weight tensor for `--csv DIR`, labelled by position (the demo inputs have no words)."""
    return Matrix.of(m)


def shape(t) -> str:
    return str(tuple(t.shape) if hasattr(t, "shape") else tuple(t))


def matrix_lines(title: str, m, digits: int | None = DIGITS) -> list[str]:
    """`title` with its size and rounding, then the rows (`digits` decimals; None: integers such as a mask);
    cut to the top-left MAX_SHOWN x MAX_SHOWN block beyond that, and the heading says so."""
    rows = m.tolist()
    n_rows, n_cols = len(rows), len(rows[0]) if rows else 0
    size = f"{n_rows}x{n_cols}" + ("" if digits is None else ", " + tr("{digits} decimals").format(digits=digits))
    if n_rows > MAX_SHOWN or n_cols > MAX_SHOWN:
        size += "; " + tr("cut to the first {shown} rows and columns, the whole matrix: --csv DIR").format(
            shown=MAX_SHOWN)
    cell = (lambda v: str(int(v))) if digits is None else (lambda v: f"{v:.{digits}f}")
    body = ["  " + " ".join(cell(v) for v in row[:MAX_SHOWN]) for row in rows[:MAX_SHOWN]]
    return [tr("{title} ({size}):").format(title=title, size=size), *body]


def row_sums_line(title: str, sums) -> str:
    """`title`: the row sums at SUM_DIGITS decimals; beyond MAX_SHOWN rows, cut and said so."""
    values = sums.tolist()
    shown = " ".join(f"{s:.{SUM_DIGITS}f}" for s in values[:MAX_SHOWN])
    if len(values) > MAX_SHOWN:
        shown += " " + tr("... (first {shown} of {n} rows)").format(shown=MAX_SHOWN, n=len(values))
    return tr("{title} ({digits} decimals): {values}").format(title=title, digits=SUM_DIGITS, values=shown)
