"""Writing checkpoints that lose nothing: atomic writes, config embedded, the RNG state; pruning old ones.

A checkpoint is a `torch.save` of plain containers and tensors that `torch.load(weights_only=True)` reads
back (model/saved.py reads it, below training, for everyone that decodes). It embeds the resolved config, so
decoding rebuilds the exact model. Files are written to a temporary name and renamed: a kill at any moment
leaves the last good checkpoint whole.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from transformer_min.core.config import Config, config_to_dict
from transformer_min.core.io import atomic_write
from transformer_min.model.saved import FORMAT, clean_state_dict, list_checkpoints, unwrap


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(rng: dict) -> None:
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def save_checkpoint(path: Path, *, model: nn.Module, cfg: Config, step: int, optimizer=None,
                    scheduler=None, scaler=None, data_state: dict | None = None,
                    extra: dict | None = None, ranks: list | None = None) -> Path:
    """Everything needed to resume exactly: weights, optimizer, schedule, RNG and data state.

    `ranks`: under DDP, every rank's {"data", "rng"} (rank order), so each rank resumes its own stream;
    "data" and "rng" hold rank 0's (what a single process, or another world size, continues from).
    """
    state = {
        "format": FORMAT,
        "config": config_to_dict(cfg),
        "step": step,
        "model": clean_state_dict(unwrap(model).state_dict()),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None,
        "rng": rng_state(),
        "data": data_state or {},
        "ranks": ranks or [],
        "extra": extra or {},
    }
    atomic_write(Path(path), lambda tmp: torch.save(state, tmp))
    return Path(path)


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints (best.pt is kept separately)."""
    for p in list_checkpoints(run_dir)[:-keep_last]:
        p.unlink(missing_ok=True)
