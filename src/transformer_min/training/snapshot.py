"""The checkpointing hook: a trainer's whole state to a checkpoint and back (exact resume, DDP included).

Rank 0 writes. For step checkpoints (which every rank reaches) each rank's data and RNG state is
gathered too, so a resume at the same world size continues every rank's own stream.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from transformer_min.data.tokenizer import vocab_hash
from transformer_min.core import distributed as dist_utils
from transformer_min.core.config import Config
from transformer_min.data.batch import BatchSource
from transformer_min.training.hooks import Patience
from transformer_min.model.saved import checkpoint_dir, load_model_state
from transformer_min.training.checkpoint import prune_checkpoints, rng_state, save_checkpoint, set_rng_state
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


class Trainer(Protocol):
    """What a checkpoint holds of a training.trainer.Trainer (which imports this module)."""

    cfg: Config
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any  # torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    source: BatchSource
    dist: dist_utils.DistInfo
    patience: Patience
    step: int
    train_seconds: float


class Checkpointing:
    """step_NNNNNNN.pt every `interval` steps and at the end (the newest `keep_last` kept), best.pt on a new best."""

    def __init__(self, run_dir: Path, interval: int, keep_last: int):
        self.run_dir, self.interval, self.keep_last = Path(run_dir), interval, keep_last

    def due(self, step: int) -> bool:
        return step % self.interval == 0

    def save(self, trainer: Trainer, name: str | None = None) -> Path | None:
        """A step checkpoint (name None) or a named one such as best.pt; the path on rank 0, else None."""
        ranks = None
        if name is None and trainer.dist.enabled:  # a collective: every rank takes part
            ranks = dist_utils.gather_objects({"data": trainer.source.state_dict(), "rng": rng_state()}, trainer.dist)
        if not trainer.dist.is_main:
            return None
        path = checkpoint_dir(self.run_dir) / (name or f"step_{trainer.step:07d}.pt")
        extra = {"best_score": trainer.patience.best_score, "bad_evals": trainer.patience.bad_evals,
                 "train_seconds": trainer.train_seconds, "world_size": trainer.dist.world_size}
        spm = self.run_dir / "spm.model"
        if spm.is_file():  # the vocabulary's identity: every pairing with data or an export checks it
            extra["vocab"] = vocab_hash(spm)
        save_checkpoint(path, model=trainer.model, cfg=trainer.cfg, step=trainer.step, optimizer=trainer.optimizer,
                        scheduler=trainer.scheduler, scaler=trainer.scaler, data_state=trainer.source.state_dict(),
                        extra=extra, ranks=ranks)
        if name is None:
            prune_checkpoints(self.run_dir, self.keep_last)
        return path


def restore(trainer: Trainer, state: dict) -> None:
    """Continue exactly from a checkpoint: weights, optimizer, schedule, RNG, data order, counters."""
    load_model_state(trainer.model, state)
    if state.get("optimizer"):
        trainer.optimizer.load_state_dict(state["optimizer"])
    if state.get("scheduler"):
        trainer.scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler") and trainer.scaler.is_enabled():
        trainer.scaler.load_state_dict(state["scaler"])
    restore_streams(trainer, state)
    trainer.step = int(state["step"])
    extra = state.get("extra", {})
    trainer.patience.best_score = extra.get("best_score")
    trainer.patience.bad_evals = extra.get("bad_evals", 0)
    trainer.train_seconds = extra.get("train_seconds", 0.0)


def restore_streams(trainer: Trainer, state: dict) -> None:
    """Data order and RNG: each rank its own at the same world size; otherwise rank 0's, resharded."""
    dist, source = trainer.dist, trainer.source
    saved_world = state.get("extra", {}).get("world_size", 1)
    ranks = state.get("ranks") or []
    if dist.enabled and saved_world == dist.world_size == len(ranks):
        mine = ranks[dist.rank]  # this rank's own data stream and RNG
        if mine.get("data"):
            source.load_state_dict(mine["data"])
        set_rng_state(mine.get("rng", {}))
        return
    if state.get("data") and saved_world == dist.world_size == 1:
        source.load_state_dict(state["data"])
    elif state.get("data"):  # another world size (or no per-rank states): shards restart
        log.warning(tr("resuming a %d-process run on %d processes: data order restarts per shard"),
                    saved_world, dist.world_size)
        source.load_state_dict({**state["data"], "reshard": True})
    if dist.rank == 0:
        set_rng_state(state.get("rng", {}))
