"""Attention matrices as CSV: rows = queries, columns = keys, each labelled by its token (section 3.2.1).

One file per matrix (per head), written with the csv module to a temp file in the same folder and
renamed (os.replace), so a reader never sees half a file. `tmin verify --csv DIR`, `tmin decode --csv DIR`
and `tmin translate --csv DIR` write them (the option itself, and its folder, are the CLI's: `cli.common.csv_dir`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from transformer_min.core.io import atomic_write
from transformer_min.core.i18n import tr

CORNER = "query \\ key"


@dataclass
class Matrix:
    """A 2-D matrix with its row labels (queries) and column labels (keys)."""

    values: list[list[float]]
    rows: list[str]
    cols: list[str]

    @classmethod
    def of(cls, m, rows: list[str] | None = None, cols: list[str] | None = None) -> "Matrix":
        """From a (Lq, Lk) tensor or nested list; labels default to pos0, pos1, ... (inputs without words)."""
        values = m.tolist() if hasattr(m, "tolist") else [list(r) for r in m]
        n_cols = len(values[0]) if values else 0
        return cls(values, rows or [f"pos{i}" for i in range(len(values))], cols or [f"pos{j}" for j in range(n_cols)])


def write_matrix_csv(path: str | Path, matrix: Matrix, digits: int = 6) -> Path:
    """Write `matrix` as CSV (header: corner cell + key labels; one row per query) atomically; a file of that
    name that is not an earlier matrix of ours (its corner cell) is left as it is."""
    from transformer_min.core.io import atomic_write

    check_csv_path(path)

    if len(matrix.rows) != len(matrix.values) or any(len(r) != len(matrix.cols) for r in matrix.values):
        raise ValueError(tr("{path}: labels ({n_rows} x {n_cols}) do not fit the matrix").format(path=path, n_rows=len(matrix.rows), n_cols=len(matrix.cols)))

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            out = csv.writer(f)
            out.writerow([CORNER, *matrix.cols])
            for label, row in zip(matrix.rows, matrix.values):
                out.writerow([label, *(f"{v:.{digits}f}" for v in row)])

    path = Path(path)
    atomic_write(path, write)
    return path


def check_csv_path(path: str | Path) -> Path:
    """`path` if it is new or an earlier matrix of ours (its corner cell), else a ConfigError naming it."""
    from transformer_min.core.io import check_replaceable, has_marker

    return check_replaceable(path, "--csv", tr("an earlier tmin attention CSV"), has_marker(f"{CORNER},", f'"{CORNER}",'))


def write_matrices(directory: str | Path, prefix: str, matrices: dict[str, Matrix]) -> list[Path]:
    """One `<prefix>_<name>.csv` per matrix in `directory` (every name checked before the first is written)."""
    paths = {name: check_csv_path(Path(directory) / f"{prefix}_{name}.csv") for name in matrices}
    return [write_matrix_csv(paths[name], m) for name, m in matrices.items()]


def write_cross_attention(directory: str | Path, heads, rows: list[str], cols: list[str]) -> list[Path]:
    """`tmin decode/translate --csv DIR`: the last decoder layer's cross-attention (H, T, S) of one sentence,
    `cross_attn_head<h>.csv` per head and `cross_attn_mean.csv` (rows = output tokens, columns = source tokens),
    in the existing folder `directory`."""
    matrices = {f"head{h}": Matrix.of(heads[h], rows, cols) for h in range(heads.shape[0])}
    matrices["mean"] = Matrix.of(heads.mean(0), rows, cols)
    return write_matrices(directory, "cross_attn", matrices)
