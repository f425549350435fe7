"""Set up and run training from a Config: the run directory, the batch source, the evaluator."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from transformer_min.config import Config, config_to_dict, with_overrides
from transformer_min.errors import CheckpointError, ConfigError
from transformer_min.training import distributed as dist_utils
from transformer_min.training import tasks
from transformer_min.io import atomic_write_text
from transformer_min.training.checkpoint import (
    checkpoint_config,
    config_differences,
    read_checkpoint,
)
from transformer_min.training.trainer import Trainer, TrainResult

log = logging.getLogger(__name__)


def to_toml(data: dict) -> str:
    """Serialise our flat two-level config dict as TOML (the resolved config of a run)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = []
    for section, fields in data.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {value(v)}" for k, v in fields.items() if v is not None]
        lines.append("")
    return "\n".join(lines)


def synthetic_config(cfg: Config) -> Config:
    """The synthetic tasks define their own vocabulary (11 ids: PAD 0, BOS 1, EOS 2, symbols 3-10)."""
    cfg = with_overrides(cfg, "vocab", src_size=tasks.VOCAB_SIZE, tgt_size=tasks.VOCAB_SIZE,
                         pad_id=tasks.PAD_ID, bos_id=tasks.BOS_ID, eos_id=tasks.EOS_ID)
    return cfg


class SyntheticEvaluator:
    """Greedy decoding exact-match accuracy on fresh sequences (200 during training, 1000 at the end)."""

    def __init__(self, task: str, seed: int, device: torch.device, n_during: int = 200, n_final: int = 1000):
        self.task, self.seed, self.device = task, seed, device
        self.n_during, self.n_final = n_during, n_final

    def __call__(self, model, final: bool) -> dict:
        acc = synthetic_accuracy(model, self.task, self.n_final if final else self.n_during, self.seed, self.device)
        return {"accuracy": acc, "score": acc}


def synthetic_accuracy(model, task: str, n: int, seed: int, device, batch_size: int = 250,
                       max_len_offset: int = 50) -> float:
    """Fraction of n fresh sequences decoded exactly right by greedy search."""
    from transformer_min.decoding import greedy_decode, strip
    from transformer_min.training.batch import pad_sequences

    pairs = tasks.eval_set(task, n, seed)
    correct = 0
    for i in range(0, n, batch_size):
        chunk = pairs[i:i + batch_size]
        src = pad_sequences([s + [tasks.EOS_ID] for s, _ in chunk], tasks.PAD_ID).to(device)
        out = strip(greedy_decode(model, src, tasks.BOS_ID, tasks.EOS_ID, tasks.PAD_ID, max_len_offset),
                    tasks.EOS_ID, tasks.PAD_ID)
        correct += sum(o == want for o, (_, want) in zip(out, chunk))
    return correct / n


def make_run_dir(cfg: Config) -> Path:
    name = cfg.train.name or f"{cfg.train.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(cfg.train.out_dir) / name


def prepare(cfg: Config, dist: dist_utils.DistInfo, device: torch.device, run_dir: Path):
    """Model, batch source and evaluator for cfg.train.task."""
    from transformer_min.model import build_model

    task = cfg.train.task
    if task in tasks.TASKS:
        source = tasks.SyntheticTask(task, cfg.train.batch_tokens, cfg.train.seed, dist.rank)
        evaluator = SyntheticEvaluator(task, cfg.train.seed, device)
    elif task == "translation":
        from transformer_min.data.pipeline import translation_setup

        source, evaluator = translation_setup(cfg, run_dir, dist, device)
    else:  # pragma: no cover - Literal-validated
        raise ConfigError(f"train.task: unknown task {task!r}")
    torch.manual_seed(cfg.train.seed)
    return build_model(cfg), source, evaluator


def train(cfg: Config | None, resume: str | None = None, steps: int | None = None,
          time_budget_minutes: float | None = None) -> tuple[TrainResult, Path]:
    """Train under cfg (or continue the run at `resume`); return the result and the run directory.

    On resume the checkpoint's config is used; a `cfg` given as well must agree with it on the
    model and vocabulary; `steps` and `time_budget_minutes` (total, counting the time already
    trained) may extend the run.
    """
    if resume:
        state = read_checkpoint(resume)
        saved = checkpoint_config(state)
        if cfg is not None:
            diffs = config_differences(saved, cfg)
            if diffs:
                raise CheckpointError(f"{state['path']}: --resume with a config that disagrees with the "
                                      "checkpoint: " + "; ".join(diffs) + " (drop --config to use the saved one)")
        cfg = saved
        cfg = with_overrides(cfg, "train", steps=steps, time_budget_minutes=time_budget_minutes)
        run_dir = Path(resume) if Path(resume).is_dir() else Path(state["path"]).parent.parent
    else:
        state = None
        run_dir = make_run_dir(cfg)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    dist = dist_utils.init_distributed("cuda" if cfg.train.device == "cuda" or (
        cfg.train.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        device = dist_utils.device_for(cfg.train.device, dist)
        model, source, evaluator = prepare(cfg, dist, device, run_dir)
        trainer = Trainer(cfg, model, source, run_dir, device, evaluator, dist)
        if state is not None:
            trainer.restore(state)
            log.info("resumed %s at step %d", state["path"], trainer.step)
        if dist.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(run_dir / "config.toml", to_toml(config_to_dict(cfg)))
            log.info("run directory %s (%s, %d parameters)", run_dir, device,
                     sum(p.numel() for p in model.parameters()))
        result = trainer.fit()
    finally:
        dist_utils.shutdown(dist)
    return result, run_dir
