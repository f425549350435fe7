"""The training loop of section 5: Adam + eq. (3), label smoothing, token batches, checkpoints.

One loop serves one process and torchrun/DDP alike: each rank draws its own shard of batches, the
loss is normalised by the target tokens of the whole step (all micro-batches, all ranks), and only
rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from transformer_min.core.config import Config
from transformer_min.core.hardware import cpu_info, precision_for
from transformer_min.core import distributed as dist_utils
from transformer_min.data.batch import Batch, BatchSource
from transformer_min.core.io import atomic_write, atomic_write_text
from transformer_min.training.checkpoint import (
    checkpoint_dir,
    load_model_state,
    prune_checkpoints,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from transformer_min.training.loss import label_smoothed_nll
from transformer_min.training.optim import build_optimizer
from transformer_min.training.schedule import noam_scheduler

log = logging.getLogger(__name__)

Evaluator = Callable[[nn.Module, bool], dict]  # (model, final) -> metrics with a "score" key


@dataclass
class TrainResult:
    step: int
    stopped: str  # "steps", "time", "patience" or "interrupted"
    train_seconds: float
    last_metrics: dict = field(default_factory=dict)
    best_score: float | None = None


def autocast_context(device: torch.device, precision: str):
    """bf16: autocast; fp16: autocast (with a GradScaler in the loop); fp32: nothing."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class Trainer:
    """Trains `model` on `source` under `cfg.train`, writing to `run_dir` (rank 0 only)."""

    def __init__(self, cfg: Config, model: nn.Module, source: BatchSource, run_dir: Path,
                 device: torch.device, evaluator: Evaluator | None = None,
                 dist: dist_utils.DistInfo | None = None):
        t = cfg.train
        self.cfg, self.source, self.run_dir, self.device = cfg, source, Path(run_dir), device
        self.evaluator = evaluator
        self.dist = dist or dist_utils.DistInfo()
        self.pad_id = cfg.vocab.pad_id
        self.model = model.to(device)
        self.optimizer = build_optimizer(self.model, t.betas, t.eps, t.weight_decay)
        self.scheduler = noam_scheduler(self.optimizer, cfg.model.d_model, t.warmup_steps, t.lr_factor)
        self.precision = precision_for(t.precision, device)  # auto: from the hardware
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision == "fp16")
        self.wrapped = dist_utils.wrap_model(self.model, self.dist, device)
        if t.compile:
            self.wrapped = torch.compile(self.wrapped)
        self.step = 0
        self.best_score: float | None = None
        self.bad_evals = 0
        self.train_seconds = 0.0

    # ------------------------------------------------------------------ one optimizer step
    def train_step(self, micro_batches: list[Batch]) -> dict:
        """One optimizer step over `micro_batches` (gradient accumulation when more than one).

        The loss is the label-smoothed sum divided by the target tokens of the whole step across
        ranks; DDP averages gradients over ranks, hence the factor world_size. Gradients are
        synchronised only on the last micro-batch.
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
                    logits = self.wrapped(b.src, b.tgt_in)  # (B, T, V)
                    loss, nll, _ = label_smoothed_nll(logits, b.tgt_out, t.label_smoothing, self.pad_id)
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.item()
            nll_sum += nll.item()
        if t.clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        lr = self.optimizer.param_groups[0]["lr"]
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        return {"step": self.step, "loss": loss_sum / max(n_local, 1), "nll": nll_sum / max(n_local, 1),
                "lr": lr, "tokens": n_local}

    # ------------------------------------------------------------------ checkpoints
    def save(self, name: str | None = None) -> Path | None:
        """Rank 0 writes; for step checkpoints (which every rank reaches) each rank's data and RNG
        state is gathered, so a resume at the same world size continues every rank's own stream."""
        ranks = None
        if name is None and self.dist.enabled:
            ranks = dist_utils.gather_objects({"data": self.source.state_dict(), "rng": rng_state()}, self.dist)
        if not self.dist.is_main:
            return None
        path = checkpoint_dir(self.run_dir) / (name or f"step_{self.step:07d}.pt")
        save_checkpoint(path, model=self.model, cfg=self.cfg, step=self.step, optimizer=self.optimizer,
                        scheduler=self.scheduler, scaler=self.scaler, data_state=self.source.state_dict(),
                        extra={"best_score": self.best_score, "bad_evals": self.bad_evals,
                               "train_seconds": self.train_seconds, "world_size": self.dist.world_size},
                        ranks=ranks)
        if name is None:
            prune_checkpoints(self.run_dir, self.cfg.train.keep_last)
        return path

    def restore(self, state: dict) -> None:
        """Continue exactly from a checkpoint: weights, optimizer, schedule, RNG, data order."""
        load_model_state(self.model, state)
        if state.get("optimizer"):
            self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scheduler"):
            self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        saved_world = state.get("extra", {}).get("world_size", 1)
        ranks = state.get("ranks") or []
        if self.dist.enabled and saved_world == self.dist.world_size == len(ranks):
            mine = ranks[self.dist.rank]  # this rank's own data stream and RNG
            if mine.get("data"):
                self.source.load_state_dict(mine["data"])
            set_rng_state(mine.get("rng", {}))
        else:
            if state.get("data") and saved_world == self.dist.world_size == 1:
                self.source.load_state_dict(state["data"])
            elif state.get("data"):  # another world size (or no per-rank states): shards restart
                log.warning("resuming a %d-process run on %d processes: data order restarts per shard",
                            saved_world, self.dist.world_size)
                self.source.load_state_dict({**state["data"], "reshard": True})
            if self.dist.rank == 0:
                set_rng_state(state.get("rng", {}))
        self.step = int(state["step"])
        extra = state.get("extra", {})
        self.best_score = extra.get("best_score")
        self.bad_evals = extra.get("bad_evals", 0)
        self.train_seconds = extra.get("train_seconds", 0.0)

    def machine_record(self) -> dict:
        """The precision actually used, the device, torch's threads and the CPU (model, capability)."""
        info = cpu_info()
        return {"precision": self.precision, "device": str(self.device), "threads": torch.get_num_threads(),
                "world_size": self.dist.world_size, "cpu": info.model, "cpu_capability": info.flags,
                "gpu": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None}

    # ------------------------------------------------------------------ the loop
    def evaluate(self, final: bool = False) -> dict:
        if self.evaluator is None or not self.dist.is_main:
            return {}
        self.model.eval()
        with torch.no_grad(), autocast_context(self.device, self.precision):
            metrics = self.evaluator(self.model, final)
        self.model.train()
        return metrics

    def _after_eval(self, metrics: dict) -> bool:
        """Track the best score (save best.pt); return True when patience runs out."""
        score = metrics.get("score")
        if score is None:
            return False
        if self.best_score is None or score > self.best_score:
            self.best_score, self.bad_evals = score, 0
            self.save("best.pt")
            return False
        self.bad_evals += 1
        p = self.cfg.train.patience
        return p > 0 and self.bad_evals >= p

    def fit(self) -> TrainResult:
        t = self.cfg.train
        metrics_log = MetricsLog(self.run_dir / "metrics.jsonl", self.step) if self.dist.is_main else None
        if metrics_log is not None:  # what this segment ran on: results compare across machines by it
            metrics_log.write({"step": self.step, "event": "start", **self.machine_record()})
        bar = _progress(t.steps, self.step, self.dist.is_main)
        budget = t.time_budget_minutes * 60.0
        stopped, last_metrics = "steps", {}
        try:
            while self.step < t.steps:
                # every stop decision is rank 0's, so all ranks leave the loop together
                if budget and dist_utils.broadcast_flag(self.train_seconds >= budget, self.device, self.dist):
                    stopped = "time"
                    break
                t0 = time.perf_counter()
                rec = self.train_step([self.source.next_batch() for _ in range(t.accum_steps)])
                dt = time.perf_counter() - t0
                self.train_seconds += dt
                rec["tokens_per_s"] = rec["tokens"] * self.dist.world_size / dt
                rec["train_seconds"] = round(self.train_seconds, 2)
                if dist_utils.broadcast_flag(not math.isfinite(rec["loss"]), self.device, self.dist):
                    log.error("loss is %s at step %d; stopping (lower train.lr_factor or set train.clip)",
                              rec["loss"], self.step)
                    stopped = "diverged"
                    break
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}",
                                    tok_s=f"{rec['tokens_per_s']:.0f}")
                stop = False
                epoch_end = getattr(self.source, "pop_epoch_end", lambda: False)()
                if self.step % t.eval_interval == 0 or self.step == t.steps or epoch_end:
                    last_metrics = self.evaluate(final=False)
                    rec.update({f"eval_{k}": v for k, v in last_metrics.items()})
                    stop = self._after_eval(last_metrics)
                    if bar is None and self.dist.is_main:
                        log.info("step %d loss %.4f lr %.2e tok/s %.0f %s", self.step, rec["loss"], rec["lr"],
                                 rec["tokens_per_s"], " ".join(f"{k} {v:.4g}" for k, v in last_metrics.items()))
                if metrics_log is not None:
                    metrics_log.write(rec)
                if self.step % t.checkpoint_interval == 0:
                    self.save()
                    if metrics_log is not None:
                        metrics_log.flush()
                        plot_metrics(self.run_dir)
                if dist_utils.broadcast_flag(stop, self.device, self.dist):
                    stopped = "patience"
                    break
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            if bar is not None:
                bar.close()
        if stopped != "interrupted":
            final = self.evaluate(final=True)
            if final:
                last_metrics = {f"final_{k}": v for k, v in final.items()}
                self._after_eval(final)
        self.save()
        if metrics_log is not None:
            if last_metrics and stopped != "interrupted":
                metrics_log.write({"step": self.step, **last_metrics})
            metrics_log.close()
            plot_metrics(self.run_dir)
        return TrainResult(self.step, stopped, self.train_seconds, last_metrics, self.best_score)


class MetricsLog:
    """metrics.jsonl, one JSON object per step. On resume, records after the checkpoint are dropped."""

    def __init__(self, path: Path, resume_step: int):
        self.path = Path(path)
        kept = []
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line).get("step", 0) <= resume_step:
                        kept.append(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill
        atomic_write_text(self.path, "".join(k + "\n" for k in kept))
        self.f = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps(rec) + "\n")

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_metrics(run_dir: Path) -> Path | None:
    """loss and lr against step -> run_dir/metrics.png (written atomically)."""
    recs = [r for r in read_metrics(run_dir) if "loss" in r]
    if not recs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in recs]
    fig, ax1 = plt.subplots(figsize=(7, 4))
    ax1.plot(steps, [r["loss"] for r in recs], color="tab:blue", lw=1, label="loss (label-smoothed)")
    ax1.set_xlabel("step")
    ax1.set_ylabel("loss", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(steps, [r["lr"] for r in recs], color="tab:orange", lw=1, label="lr (eq. 3)")
    ax2.set_ylabel("learning rate", color="tab:orange")
    ax1.set_title(Path(run_dir).name)
    fig.tight_layout()
    out = Path(run_dir) / "metrics.png"
    atomic_write(out, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return out


def _progress(total: int, initial: int, enabled: bool):
    """A tqdm bar on a terminal; None (log lines instead) when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, desc="train")
