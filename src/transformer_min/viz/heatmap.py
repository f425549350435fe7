"""Figures drawn from returned values (never hidden module state)."""

from __future__ import annotations

from pathlib import Path


def attention_heatmap(weights, cols: list[str], rows: list[str], path: str | Path, title: str = "") -> Path:
    """Draw a (rows, cols) attention matrix with token labels to a PNG (written atomically). `title` is an English
    message, drawn in the figures' language (`core.figure.ftr`)."""
    from transformer_min.core.figure import ftr, new_figure, save_png

    w = weights.detach().float().cpu().numpy()  # (rows, cols)
    fig, ax = new_figure((max(4, 0.45 * len(cols) + 2), max(3, 0.4 * len(rows) + 1.5)))
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-6), aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel(ftr("source tokens"))
    ax.set_ylabel(ftr("output tokens"))
    if title:
        ax.set_title(ftr(title), fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return save_png(fig, path, dpi=110)
