"""The training loop of section 5: Adam + eq. (3), label smoothing, token batches; hooks do the rest.

One loop serves one process and torchrun/DDP alike: each rank draws its own shard of batches, the
loss is normalised by the target tokens of the whole step (all micro-batches, all ranks), and only
rank 0 writes files. Evaluation, checkpoints, metrics and the stop rules are hooks (training.hooks,
training.snapshot), called at the points `fit` names.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from transformer_min.core import distributed as dist_utils
from transformer_min.core.config import Config
from transformer_min.core.hardware import cpu_info, precision_for
from transformer_min.data.batch import Batch, BatchSource
from transformer_min.training import snapshot
from transformer_min.training.hooks import (
    Divergence,
    Evaluation,
    MetricsRecorder,
    Patience,
    Progress,
    TimeBudget,
)
from transformer_min.training.loss import label_smoothed_nll
from transformer_min.training.optim import build_optimizer
from transformer_min.training.schedule import noam_scheduler
from transformer_min.training.task import Evaluator


@dataclass
class TrainResult:
    step: int
    stopped: str  # "steps", "time", "patience", "diverged" or "interrupted"
    train_seconds: float
    last_metrics: dict = field(default_factory=dict)
    best_score: float | None = None


def autocast_context(device: torch.device, precision: str):
    """bf16: autocast; fp16: autocast (with a GradScaler in the loop); fp32: nothing."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def interrupts_held():
    """Ctrl-C (SIGINT) inside the block waits for its end, then goes to the handler that was there before.

    For the few lines that must land together or not at all: an optimizer update and its step counter, a
    step's record and the mark that it is written. Only the main thread can hold signals; elsewhere, or when
    the handler was not installed from Python, the block runs as it is.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(signal.SIGINT)  # now, to the handler restored above (KeyboardInterrupt by default)


class Trainer:
    """Trains `model` on `source` under `cfg.train`, writing to `run_dir` (rank 0 only)."""

    def __init__(self, cfg: Config, model: nn.Module, source: BatchSource, run_dir: Path,
                 device: torch.device, evaluator: Evaluator | None = None,
                 dist: dist_utils.DistInfo | None = None):
        t = cfg.train
        self.cfg, self.source, self.run_dir, self.device = cfg, source, Path(run_dir), device
        self.dist = dist or dist_utils.DistInfo()
        self.pad_id = cfg.vocab.pad_id
        self.model = model.to(device)
        self.optimizer = build_optimizer(self.model, t.betas, t.eps, t.weight_decay)
        self.scheduler = noam_scheduler(self.optimizer, cfg.model.d_model, t.warmup_steps, t.lr_factor)
        self.precision = precision_for(t.precision, device)  # auto: from the hardware
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision == "fp16")
        self.wrapped = dist_utils.wrap_model(self.model, self.dist, device)
        # train.loss_kernel: "fused" where the model can (a linear generator), else the paper path
        self.fused_loss = cfg.train.loss_kernel == "fused" and bool(getattr(self.model, "fused_loss", False))
        if t.compile:
            self.wrapped = torch.compile(self.wrapped)
        self.step, self.train_seconds = 0, 0.0
        self.unlogged: dict | None = None  # the record of a step that landed but is not in metrics.jsonl yet
        # the hooks
        self.time_budget, self.divergence = TimeBudget(t.time_budget_minutes), Divergence()
        self.patience = Patience(t.patience)
        self.evaluation = Evaluation(evaluator, t.eval_interval, t.steps)
        self.checkpoints = snapshot.Checkpointing(self.run_dir, t.checkpoint_interval, t.keep_last)
        self.metrics = MetricsRecorder(self.run_dir, self.dist.is_main)

    @property
    def best_score(self) -> float | None:
        return self.patience.best_score

    # ------------------------------------------------------------------ one optimizer step
    def train_step(self, micro_batches: list[Batch]) -> dict:
        """One optimizer step over `micro_batches` (gradient accumulation when more than one).

        The loss is the label-smoothed sum (section 5.4) divided by the target tokens of the whole step
        across ranks; DDP averages gradients over ranks, hence the factor world_size. Gradients are
        synchronised only on the last micro-batch. Adam (section 5.3) steps at the lr of eq. (3).
        """
        t = self.cfg.train
        self.wrapped.train()
        n_local = sum(b.num_tokens(self.pad_id) for b in micro_batches)
        n_total = dist_utils.all_reduce_sum(n_local, self.device, self.dist)
        scale = self.dist.world_size / max(n_total, 1)
        loss_sum = nll_sum = 0.0
        for i, b in enumerate(micro_batches):
            b = b.to(self.device)
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or not self.dist.enabled else self.wrapped.no_sync()
            with sync:
                with autocast_context(self.device, self.precision):
                    if self.fused_loss:  # generator + loss in one pass (model/generator_loss.py)
                        loss, nll, _ = self.wrapped(b.src, b.tgt_in, targets=b.tgt_out,
                                                    label_smoothing=t.label_smoothing)
                    else:  # the paper path: logits, then section 5.4's loss on them
                        logits = self.wrapped(b.src, b.tgt_in)  # (B, T, V)
                        loss, nll, _ = label_smoothed_nll(logits, b.tgt_out, t.label_smoothing, self.pad_id)
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.item()
            nll_sum += nll.item()
        if t.clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        lr = self.optimizer.param_groups[0]["lr"]
        with interrupts_held():  # the update, its step count and its record: all of them or none
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.step += 1
            self.unlogged = {"step": self.step, "loss": loss_sum / max(n_local, 1),
                             "nll": nll_sum / max(n_local, 1), "lr": lr, "tokens": n_local}
        return self.unlogged

    def timed_step(self) -> dict:
        """Draw train.accum_steps micro-batches, take one step, and add its speed and the training time."""
        t0 = time.perf_counter()
        rec = self.train_step([self.source.next_batch() for _ in range(self.cfg.train.accum_steps)])
        dt = time.perf_counter() - t0
        self.train_seconds += dt
        rec["tokens_per_s"] = rec["tokens"] * self.dist.world_size / dt
        rec["train_seconds"] = round(self.train_seconds, 2)
        return rec

    # ------------------------------------------------------------------ state
    def save(self, name: str | None = None) -> Path | None:
        """A checkpoint, its log on disk first: a kill between the two never leaves a checkpoint ahead of its log."""
        self.metrics.flush()
        return self.checkpoints.save(self, name)

    def restore(self, state: dict) -> None:
        snapshot.restore(self, state)

    def machine_record(self) -> dict:
        """The precision actually used, the device, torch's threads and the CPU (model, capability)."""
        info = cpu_info()
        return {"precision": self.precision, "device": str(self.device), "threads": torch.get_num_threads(),
                "world_size": self.dist.world_size, "cpu": info.model, "cpu_capability": info.flags,
                "gpu": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None}

    # ------------------------------------------------------------------ the loop
    def evaluate(self, final: bool = False) -> dict:
        return self.evaluation.run(self.model, final, self.dist.is_main, autocast_context(self.device, self.precision))

    def after_eval(self, metrics: dict) -> bool:
        """Track the best score (save best.pt); return True when patience runs out."""
        improved, exhausted = self.patience.update(metrics)
        if improved:
            self.save("best.pt")
        return exhausted

    def fit(self) -> TrainResult:
        """Steps until train.steps, or a stop rule: time budget, divergence, patience, Ctrl-C."""
        self.metrics.start(self.step, self.machine_record())  # results compare across machines by it
        progress = Progress(self.cfg.train.steps, self.step, self.dist.is_main)
        stopped, last_metrics = "steps", {}
        try:
            while stopped == "steps" and self.step < self.cfg.train.steps:
                stopped, last_metrics = self.one_step(progress, last_metrics)
        except KeyboardInterrupt:
            stopped = "interrupted"
            if self.unlogged is not None:  # e.g. Ctrl-C during an evaluation: the step landed, its record not yet
                self.metrics.write(self.unlogged)
                self.unlogged = None
        finally:
            progress.close()
        if stopped in ("steps", "time", "patience"):
            last_metrics = self.final_evaluation() or last_metrics
        # After a non-finite loss the weights are not worth an evaluation or a checkpoint (nor a best.pt):
        # the newest checkpoint on disk stays the last good step, and keep_last prunes none of them.
        if stopped != "diverged":
            self.save()
        self.metrics.finish({"step": self.step, **last_metrics} if last_metrics and stopped != "interrupted" else None)
        return TrainResult(self.step, stopped, self.train_seconds, last_metrics, self.best_score)

    def one_step(self, progress: Progress, last_metrics: dict) -> tuple[str, dict]:
        """One step and its hooks -> (why to stop, or "steps" to go on; the latest evaluation's metrics)."""
        if self.time_budget.exhausted(self.train_seconds, self.device, self.dist):
            return "time", last_metrics
        rec = self.timed_step()
        if self.divergence.diverged(rec, self.device, self.dist):
            return "diverged", last_metrics
        progress.update(rec)
        stop = False
        if self.evaluation.due(self.step, self.source):
            last_metrics = self.evaluate(final=False)
            rec.update({f"eval_{k}": v for k, v in last_metrics.items()})
            stop = self.after_eval(last_metrics)
            progress.evaluated(rec, last_metrics)
        with interrupts_held():
            self.metrics.write(rec)
            self.unlogged = None
        if self.checkpoints.due(self.step):
            self.save()
            self.metrics.plot()
        stop = dist_utils.broadcast_flag(stop, self.device, self.dist)
        return ("patience" if stop else "steps"), last_metrics

    def final_evaluation(self) -> dict:
        """The evaluation at the end (e.g. 1000 sequences, not 200) -> {"final_<name>": value} ({} on ranks > 0)."""
        final = self.evaluate(final=True)
        if not final:
            return {}
        self.after_eval(final)
        return {f"final_{k}": v for k, v in final.items()}
