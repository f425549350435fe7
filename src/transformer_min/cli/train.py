"""`tmin train`, `tmin average`: thin handlers over transformer_min.training."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_min.cli.argtypes import non_negative_float, path_arg, positive_int
from transformer_min.core.i18n import tr

if TYPE_CHECKING:  # annotations only: the command imports torch lazily
    import torch

    from transformer_min.core.config import Config
    from transformer_min.core.distributed import DistInfo
    from transformer_min.training.task import Task
    from transformer_min.training.trainer import TrainResult


def add_parsers(sub, parents) -> None:
    p = sub.add_parser("train", parents=parents, help="train with the paper's recipe (section 5)",
                       description="Train a model: synthetic copy/reverse tasks or translation data. "
                                   "Under torchrun it trains with DistributedDataParallel.")
    p.add_argument("--task", choices=["copy", "reverse", "translation"],
                   help="copy/reverse default to configs/<task>.toml; translation needs --config")
    p.add_argument("--resume", metavar="RUN_DIR", type=path_arg, help="continue a run exactly from its latest checkpoint")
    p.add_argument("--steps", type=positive_int, help="override train.steps")
    p.add_argument("--name", help="run name under train.out_dir (default: <task>-<time>); an existing run "
                                  "is never overwritten unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in a run directory that already holds a run (deletes that run)")
    p.add_argument("--out-dir", type=path_arg, help="override train.out_dir")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="override train.device")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"],
                   help="override train.precision (auto: bf16 where the GPU/CPU has native bf16, else fp32)")
    p.add_argument("--compile", action="store_true", default=None, help="wrap the model in torch.compile")
    p.add_argument("--seed", type=int, help="override train.seed")
    p.add_argument("--time-budget", type=non_negative_float, metavar="MINUTES",
                   help="override train.time_budget_minutes (0 = no budget)")
    p.set_defaults(func=run_train, default_config=default_config)
    add_average_parser(sub, parents)


def default_config(args: argparse.Namespace) -> str | None:
    """`--task copy|reverse` without --config: configs/<task>.toml (it wins over TMIN_CONFIG)."""
    from transformer_min.core.errors import ConfigError

    if getattr(args, "config", None) or args.resume or args.task not in ("copy", "reverse"):
        return None
    default = Path("configs") / f"{args.task}.toml"
    if not default.exists():
        raise ConfigError(tr("--task {task}: {default} not found; run from the repository root or pass --config PATH").format(task=args.task, default=default))
    return str(default)


def _train_config(args: argparse.Namespace):
    from transformer_min.cli.common import project_of
    from transformer_min.core.config import with_overrides
    from transformer_min.translation.synthetic import synthetic_config

    cfg = with_overrides(project_of(args).config, "train", task=args.task, steps=args.steps, name=args.name,
                         out_dir=args.out_dir, device=args.device, precision=args.precision, compile=args.compile,
                         seed=args.seed, time_budget_minutes=args.time_budget)
    if cfg.train.task in ("copy", "reverse"):
        cfg = synthetic_config(cfg)
    return cfg


def make_task(cfg: Config, dist: DistInfo, device: torch.device, run_dir: Path) -> Task:
    """The task train.task names (a training.task.TaskFactory): copy/reverse from data, translation from translation."""
    if cfg.train.task == "translation":
        from transformer_min.translation.task import translation_task

        return translation_task(cfg, dist, device, run_dir)
    from transformer_min.translation.synthetic import synthetic_task

    return synthetic_task(cfg, dist, device, run_dir)


def train(cfg: Config | None, resume: str | None = None, steps: int | None = None,
          time_budget_minutes: float | None = None, overwrite: bool = False,
          num_threads: int = 0) -> tuple[TrainResult, Path]:
    """training.run.train on the task cfg.train.task names (on --resume: the checkpoint's) -> (result, run_dir);
    num_threads: settings.json's (0: from the machine)."""
    from transformer_min.training import run

    return run.train(cfg, make_task, resume=resume, steps=steps, time_budget_minutes=time_budget_minutes,
                     overwrite=overwrite, num_threads=num_threads)


def run_train(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of, sets_of
    from transformer_min.core.hardware import check_num_threads

    project = project_of(args)
    threads = project.runtime.num_threads
    check_num_threads(threads, project.origin("num_threads"))
    if args.resume:
        from transformer_min.core.errors import ConfigError

        if args.overwrite:
            raise ConfigError(tr("--overwrite and --resume exclude each other: --resume continues the run, --overwrite deletes it; drop one of them"))
        ignored = [flag for flag, value in (("--task", args.task), ("--name", args.name), ("--out-dir", args.out_dir),
                                            ("--device", args.device), ("--precision", args.precision),
                                            ("--compile", args.compile or None), ("--seed", args.seed),
                                            ("--set", [i for i in sets_of(args) if not i.startswith("settings.")]
                                             or None))
                   if value is not None]
        if ignored:  # they were silently dropped: the run continues under its saved config
            raise ConfigError(tr("{items} with --resume: a resumed run keeps its own config ({resume}/config.toml); only --steps and --time-budget extend it; fix: drop {items}, or start a new run with them (--name NEW_NAME)").format(items=', '.join(ignored), resume=args.resume))
        cfg = project.config if getattr(args, "config", None) else None
        result, run_dir = train(cfg, resume=args.resume, steps=args.steps, time_budget_minutes=args.time_budget,
                                num_threads=threads)
    else:
        result, run_dir = train(_train_config(args), overwrite=args.overwrite, num_threads=threads)
    metrics = " ".join(f"{k} {v:.4g}" for k, v in result.last_metrics.items() if isinstance(v, float))
    print(tr("run {run_dir}: stopped at step {step} ({stopped}) after {train_seconds:.1f} s of training. {metrics}").format(run_dir=run_dir, step=result.step, stopped=result.stopped, train_seconds=result.train_seconds, metrics=metrics))
    if result.stopped == "interrupted":
        print(tr("checkpoint saved; continue with: tmin train --resume {run_dir}").format(run_dir=run_dir))
        return 130
    if result.stopped == "diverged":  # the loss went NaN/inf: not a finished run
        print(tr("error: training diverged at step {step} (the loss is not finite); fix: lower train.lr_factor, set train.clip (e.g. 1.0) or raise train.warmup_steps").format(step=result.step), file=sys.stderr)
        return 1
    return 0


def add_average_parser(sub, parents) -> None:
    a = sub.add_parser("average", parents=parents, help="average the last checkpoints of a run (section 6.1)")
    a.add_argument("run_dir", type=path_arg, help="a run directory (runs/<name>)")
    a.add_argument("--last", type=positive_int, default=5, help="how many of the newest step checkpoints (default 5)")
    a.add_argument("--out", type=path_arg,
                   help="output file (default: RUN_DIR/checkpoints/averaged.safetensors; a name ending in .pt is "
                        "written with torch.save)")
    a.set_defaults(func=run_average, needs_config=False)


def run_average(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of
    from transformer_min.core.project import with_sets
    from transformer_min.training.averaging import average_run

    with_sets(None, project_of(args), (), "tmin average (it averages weights)")  # only --set settings.KEY applies
    out, used = average_run(Path(args.run_dir), args.last, Path(args.out) if args.out else None)
    print(tr("averaged {n_used} checkpoints ({items}) -> {out}").format(n_used=len(used), items=', '.join((p.name for p in used)), out=out))
    return 0
