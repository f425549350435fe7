"""What the trainer needs from a task, and nothing more: the trainer does not know which task it trains.

A task is built by a `TaskFactory` once the run's config, process group, device and run directory are
known (on --resume the config comes from the checkpoint). The copy and reverse tasks are in
`translation.synthetic.synthetic_task`, translation in `translation.task.translation_task`; the command picks one
from train.task and hands it to `training.run.train`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Protocol

import torch
from torch import nn

from transformer_min.core.config import Config, origin_of
from transformer_min.core.distributed import DistInfo
from transformer_min.core.errors import ConfigError
from transformer_min.data.batch import BatchSource
from transformer_min.core.i18n import tr

Evaluator = Callable[[nn.Module, bool], dict]  # (model, final) -> metrics with a "score" key (higher is better)


class Task(Protocol):
    """Training batches (this rank's shard), an evaluator (or None) and the vocabulary sizes it uses."""

    source: BatchSource
    evaluate: Optional[Evaluator]
    src_vocab_size: int
    tgt_vocab_size: int


TaskFactory = Callable[[Config, DistInfo, torch.device, Path], Task]  # (cfg, dist, device, run_dir) -> Task


def check_task_vocab(cfg: Config, task: Task) -> None:
    """The model's embeddings (section 3.4) must hold every id the task's batches contain."""
    for side in ("src", "tgt"):
        need, have = getattr(task, f"{side}_vocab_size"), getattr(cfg.vocab, f"{side}_size")
        if need > have:
            raise ConfigError(tr("{where}vocab.{side}_size = {have}, but train.task {task!r} uses {need} ids; fix: set vocab.{side}_size = {need}").format(where=origin_of(cfg, f"vocab.{side}_size"), side=side, have=have, task=cfg.train.task, need=need))
