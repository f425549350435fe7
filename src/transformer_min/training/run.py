"""Set up and run training from a Config and a task: the run directory, the model, the trainer.

Which task (copy, reverse, translation) is the caller's choice: it passes a `TaskFactory`
(training.task), and training never imports the layers that define tasks above it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

import torch

from transformer_min.core import distributed as dist_utils
from transformer_min.core.config import Config, config_to_dict, origin_of
from transformer_min.core.errors import ConfigError
from transformer_min.core.hardware import apply_num_threads
from transformer_min.core.io import atomic_write_text, remove_stale_temp_files
from transformer_min.model.saved import checkpoint_dir
from transformer_min.training.resume import open_resume
from transformer_min.training.run_dir import (
    check_new_run_dir,
    check_not_in_use,
    clear_run,
    create_run_dir,
    holds_run,
    make_run_dir,
    run_dir_held,
    to_toml,
)
from transformer_min.training.task import TaskFactory, check_task_vocab
from transformer_min.training.trainer import Trainer, TrainResult
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


def train(cfg: Config | None, make_task: TaskFactory, resume: str | None = None, steps: int | None = None,
          time_budget_minutes: float | None = None, overwrite: bool = False,
          num_threads: int = 0) -> tuple[TrainResult, Path]:
    """Train under cfg (or continue the run at `resume`) on the task `make_task` builds; return the
    result and the run directory.

    On resume the checkpoint's config is used (training.resume.open_resume); a new run refuses a run
    directory that holds one, unless `overwrite`. num_threads: settings.json's (0: from the machine).
    """
    if resume:
        if dist_utils.env_rank() == 0:  # the lock is rank 0's (below): torchrun's other ranks would see it held
            check_not_in_use(Path(resume))  # "in use by process N" before "no checkpoint" of a run not saved yet
        state, cfg, run_dir = open_resume(resume, cfg, steps, time_budget_minutes)
    else:
        state, run_dir = None, make_run_dir(cfg)
        check_new_run_dir(run_dir, overwrite, origin_of(cfg, "train.name"))
    check_resources(cfg, num_threads)  # before the run directory is made: a refused config leaves nothing behind
    # Rank 0 is the run's one writer; torchrun's other ranks write nothing into the run directory.
    with run_dir_held(run_dir) if dist_utils.env_rank() == 0 else contextlib.nullcontext():
        return train_in(cfg, make_task, run_dir, state, overwrite)


def train_in(cfg: Config, make_task: TaskFactory, run_dir: Path, state: dict | None,
             overwrite: bool) -> tuple[TrainResult, Path]:
    """train() once the run directory is this process's alone."""
    dist = dist_utils.init_distributed("cuda" if cfg.train.device == "cuda" or (
        cfg.train.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        if dist.is_main:
            tidy_run_dir(run_dir, clear=overwrite and state is None and holds_run(run_dir))
        device = dist_utils.device_for(cfg.train.device, dist, origin_of(cfg, "train.device"))
        trainer = build_trainer(cfg, make_task, dist, device, run_dir, state)
        result = fit_within_memory(trainer, cfg, device)
    finally:
        dist_utils.shutdown(dist, ok=sys.exc_info()[0] is None)
    return result, run_dir


def check_resources(cfg: Config, num_threads: int = 0) -> None:
    """Threads and batch memory, before any tensor: a batch that cannot fit is the config's fault, not torch's."""
    from transformer_min.model.memory import check_batch_memory

    check_batch_memory(cfg)
    apply_num_threads(num_threads)  # settings.json num_threads; 0: torch's default bounded by the CPUs


def tidy_run_dir(run_dir: Path, clear: bool) -> None:
    """--overwrite removes the earlier run; temporary files of an interrupted save go (rank 0)."""
    if clear:
        clear_run(run_dir)
    removed = remove_stale_temp_files(run_dir, checkpoint_dir(run_dir))
    if removed:
        log.info(tr("removed %d temporary files left by an interrupted save: %s"), len(removed),
                 ", ".join(p.name for p in removed))


def build_trainer(cfg: Config, make_task: TaskFactory, dist: dist_utils.DistInfo, device: torch.device,
                  run_dir: Path, state: dict | None) -> Trainer:
    """The task, the model (seeded by train.seed), the trainer (restored from `state`); rank 0 writes config.toml."""
    from transformer_min.model.transformer import build_model

    task = make_task(cfg, dist, device, run_dir)
    check_task_vocab(cfg, task)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg)
    trainer = Trainer(cfg, model, task.source, run_dir, device, task.evaluate, dist)
    if state is not None:
        trainer.restore(state)
        log.info(tr("resumed %s at step %d"), state["path"], trainer.step)
    if dist.is_main:
        create_run_dir(run_dir)
        atomic_write_text(run_dir / "config.toml", to_toml(config_to_dict(cfg)))
        log.info(tr("run directory %s (%s, %d parameters)"), run_dir, device, sum(p.numel() for p in model.parameters()))
    return trainer


def fit_within_memory(trainer: Trainer, cfg: Config, device: torch.device) -> TrainResult:
    """trainer.fit(), with the allocator's out-of-memory error (past the estimate's lower bound) told as config."""
    try:
        return trainer.fit()
    except RuntimeError as e:
        if "can't allocate memory" not in str(e) and "out of memory" not in str(e).lower():
            raise
        from transformer_min.model.memory import batch_size_culprit

        where, name, value, fix = batch_size_culprit(cfg)  # the field check_batch_memory would name, with its source
        raise ConfigError(tr("{where}{name} = {value:,}: training ran out of memory on {device}; fix: {fix}").format(
            where=where, name=name, value=value, device=device, fix=fix)) from None
