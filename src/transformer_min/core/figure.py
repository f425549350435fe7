"""Matplotlib through its object API: each figure is a `matplotlib.figure.Figure` on its own Agg canvas.

No pyplot and no `matplotlib.use(...)`: pyplot keeps a global list of open figures and `use` switches the
backend for the whole process (a caller's interactive backend included). A figure made here is freed when
its last reference goes; files are written atomically (`core.io.atomic_write`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from transformer_min.core.io import atomic_write


def new_figure(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, **subplots: Any) -> tuple[Figure, Any]:
    """A figure of `figsize` inches with an Agg canvas and its axes (`Figure.subplots(nrows, ncols, **subplots)`:
    one Axes for 1 x 1, else an array)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **subplots)


def png_bytes(fig: Figure, dpi: int, **savefig: Any) -> bytes:
    """The figure as PNG bytes (for a writer that collects files, or an HTML page that embeds them)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, **savefig)
    return buf.getvalue()


PNG_SOFTWARE = "tmin"  # the PNG's Software text chunk: how an earlier figure of ours is recognised
PNG_MARKER = f"Software\x00{PNG_SOFTWARE}"


def save_png(fig: Figure, path: str | Path, dpi: int, **savefig: Any) -> Path:
    """Write the figure to `path` as PNG, atomically (a reader never sees half a file), marked as ours."""
    savefig.setdefault("metadata", {"Software": PNG_SOFTWARE})
    return atomic_write(Path(path), lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, **savefig))
