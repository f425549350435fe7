"""metrics.jsonl (one JSON object per step) and metrics.png, drawn from the records kept in memory.

The file is read once, when a run starts or resumes; every plot afterwards comes from the history
held here, so a checkpoint costs one small figure, not a re-read of the whole log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformer_min.core.i18n import tr
from transformer_min.core.io import atomic_write_text


def kept_lines(path: Path, resume_step: int) -> list[str]:
    """The lines of an earlier metrics.jsonl up to `resume_step` (records after the checkpoint are dropped)."""
    kept = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= resume_step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
    return kept


class MetricsLog:
    """metrics.jsonl, appended one record per step; `history` holds the step records (those with a loss)."""

    def __init__(self, path: Path, resume_step: int):
        self.path = Path(path)
        kept = kept_lines(self.path, resume_step)
        atomic_write_text(self.path, "".join(k + "\n" for k in kept))
        self.history = [r for r in map(json.loads, kept) if "loss" in r]
        self.f = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps(rec) + "\n")
        if "loss" in rec:
            self.history.append({"step": rec["step"], "loss": rec["loss"], "lr": rec["lr"]})

    def flush(self) -> None:
        """To the disk, not only to the OS: a checkpoint is fsynced, so the log it follows must be too."""
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def plot_metrics(history: list[dict], out: Path, title: str) -> Path | None:
    """Loss (label-smoothed, section 5.4) and lr (eq. (3)) against step -> `out` (PNG, written atomically).

    Uses matplotlib's object API (a Figure with the Agg canvas): no global backend switch, no pyplot state.
    """
    if not history:
        return None
    from transformer_min.core.figure import ftr, new_figure, save_png

    steps = [r["step"] for r in history]
    fig, ax1 = new_figure((7, 4))
    ax1.plot(steps, [r["loss"] for r in history], color="tab:blue", lw=1, label=ftr("loss (label-smoothed)"))
    ax1.set_xlabel(ftr("step"))
    ax1.set_ylabel(ftr("loss"), color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(steps, [r["lr"] for r in history], color="tab:orange", lw=1, label=ftr("lr (eq. 3)"))
    ax2.set_ylabel(ftr("learning rate"), color="tab:orange")
    ax1.set_title(title)
    fig.tight_layout()
    caption = tr("{title}: the label-smoothed training loss (section 5.4) and the learning rate of eq. (3) against "
                 "the step").format(title=title)
    return save_png(fig, out, dpi=100, caption=caption)
