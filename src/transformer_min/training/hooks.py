"""The trainer's hooks, one job each; `Trainer.fit` calls them at fixed points of every step.

    before the step   TimeBudget.exhausted             -> stop "time"
    after the step    Divergence.diverged              -> stop "diverged"
                      Progress.update
                      Evaluation.due / run              (every train.eval_interval, the last step, an epoch end)
                      Patience.update                  -> best.pt; stop "patience" (once the step is saved)
                      MetricsRecorder.write
                      Checkpointing.due -> save, MetricsRecorder.plot
                                                        (every train.checkpoint_interval; snapshot.py)
    at the end        Evaluation.run(final), Patience.update, save, MetricsRecorder.finish, Progress.close
                      (after "diverged": no evaluation and no checkpoint of the non-finite weights;
                       after "interrupted": the landed step's record, if still unwritten, then save)

Trainer.save flushes MetricsRecorder (fsync) before every checkpoint it writes.

The log is on disk before the checkpoint it belongs to: a kill between the two leaves records after the
checkpoint (a resume drops them), never a checkpoint ahead of its log. Ctrl-C is held (trainer.interrupts_held)
while an update and its step count land, and while a record is written and marked written.

Every stop decision is rank 0's, broadcast, so all ranks leave the loop together.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from pathlib import Path

import torch
from torch import nn

from transformer_min.core import distributed as dist_utils
from transformer_min.core.i18n import tr
from transformer_min.data.batch import BatchSource
from transformer_min.training.metrics import MetricsLog, plot_metrics
from transformer_min.training.task import Evaluator

log = logging.getLogger(__name__)


class TimeBudget:
    """Stop rule: train.time_budget_minutes of training time (0: no budget); counts resumed segments too."""

    def __init__(self, minutes: float):
        self.seconds = minutes * 60.0

    def exhausted(self, train_seconds: float, device: torch.device, dist: dist_utils.DistInfo) -> bool:
        return bool(self.seconds) and dist_utils.broadcast_flag(train_seconds >= self.seconds, device, dist)


class Divergence:
    """Stop rule: a loss that is NaN or infinite ends the run (no later step can undo it)."""

    def diverged(self, rec: dict, device: torch.device, dist: dist_utils.DistInfo) -> bool:
        if not dist_utils.broadcast_flag(not math.isfinite(rec["loss"]), device, dist):
            return False
        log.error(tr("loss is %s at step %d; stopping (lower train.lr_factor or set train.clip)"), rec["loss"], rec["step"])
        return True


class Patience:
    """The best evaluation score so far, and stop rule train.patience: that many evaluations in a row
    without a better score end the run (0: never). Its state travels in the checkpoint."""

    def __init__(self, patience: int, best_score: float | None = None, bad_evals: int = 0):
        self.patience, self.best_score, self.bad_evals = patience, best_score, bad_evals

    def update(self, metrics: dict) -> tuple[bool, bool]:
        """-> (a new best score: save best.pt, patience ran out)."""
        score = metrics.get("score")
        if score is None:
            return False, False
        if self.best_score is None or score > self.best_score:
            self.best_score, self.bad_evals = score, 0
            return True, False
        self.bad_evals += 1
        return False, self.patience > 0 and self.bad_evals >= self.patience


class Evaluation:
    """Runs the task's evaluator on rank 0 (eval mode, no gradients, the training precision)."""

    def __init__(self, evaluator: Evaluator | None, interval: int, last_step: int):
        self.evaluator, self.interval, self.last_step = evaluator, interval, last_step

    def due(self, step: int, source: BatchSource) -> bool:
        """Every `interval` steps, at the last step, and when the source has just finished an epoch."""
        epoch_end = getattr(source, "pop_epoch_end", lambda: False)()
        return step % self.interval == 0 or step == self.last_step or epoch_end

    def run(self, model: nn.Module, final: bool, is_main: bool, autocast: contextlib.AbstractContextManager) -> dict:
        if self.evaluator is None or not is_main:
            return {}
        model.eval()
        with torch.no_grad(), autocast:
            metrics = self.evaluator(model, final)
        model.train()
        return metrics


class Progress:
    """A tqdm bar on a terminal; log lines at evaluations when stderr is not a terminal (rank 0 only)."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.enabled = enabled
        self.bar = progress_bar(total, initial, enabled)

    def update(self, rec: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}")

    def evaluated(self, rec: dict, metrics: dict) -> None:
        if self.bar is None and self.enabled:
            log.info(tr("step {step} loss {loss:.4f} lr {lr:.2e} tok/s {tok_s:.0f} {metrics}").format(
                step=rec["step"], loss=rec["loss"], lr=rec["lr"], tok_s=rec["tokens_per_s"],
                metrics=" ".join(f"{k} {v:.4g}" for k, v in metrics.items())))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def progress_bar(total: int, initial: int, enabled: bool):
    """A tqdm bar on a terminal; None (log lines instead) when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, desc="train")


class MetricsRecorder:
    """metrics.jsonl and metrics.png of the run (rank 0; on the other ranks every call does nothing)."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.run_dir, self.enabled = Path(run_dir), enabled
        self.log: MetricsLog | None = None

    def start(self, step: int, machine: dict) -> None:
        """Open the log (dropping records after `step`) and write what this segment runs on."""
        if self.enabled:
            self.log = MetricsLog(self.run_dir / "metrics.jsonl", step)
            self.log.write({"step": step, "event": "start", **machine})

    def write(self, rec: dict) -> None:
        if self.log is not None:
            self.log.write(rec)

    def flush(self) -> None:
        """The records so far to the disk (fsync), before a checkpoint is written."""
        if self.log is not None:
            self.log.flush()

    def finish(self, final: dict | None) -> None:
        if self.log is not None:
            if final:
                self.log.write(final)
            self.log.close()
            self.plot()

    def plot(self) -> Path | None:
        if self.log is None:
            return None
        return plot_metrics(self.log.history, self.run_dir / "metrics.png", self.run_dir.name)
