"""`tmin train`, `tmin decode`: thin handlers over transformer_min.training and .decoding."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_min.core.argtypes import non_negative_float, path_arg, positive_int

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
    p.set_defaults(func=run_train)

    d = sub.add_parser("decode", parents=parents, help="decode token ids with a trained checkpoint",
                       description='Decode a sequence of token ids, e.g. tmin decode --checkpoint runs/x "3 5 7 2"')
    d.add_argument("tokens", help="space-separated source token ids (EOS is appended)")
    d.add_argument("--checkpoint", required=True, type=path_arg, help="a checkpoint file or a run directory (latest)")
    d.add_argument("--beam", type=positive_int, default=None, help="beam size (default: greedy; 1 = greedy)")
    d.add_argument("--alpha", type=non_negative_float, default=None,
                   help="length penalty alpha (default: decode.length_penalty)")
    d.add_argument("--attention", action="store_true", help="also print the cross-attention matrix")
    d.add_argument("--csv", metavar="DIR", type=path_arg, help="write the cross-attention as CSV, one file per head and the mean "
                                                "(rows = output tokens, columns = source tokens)")
    d.set_defaults(func=run_decode)


def _train_config(args: argparse.Namespace):
    from transformer_min.core.config import load_config, with_overrides
    from transformer_min.core.errors import ConfigError
    from transformer_min.data.tasks import synthetic_config

    config = getattr(args, "config", None)
    if not config and args.task in ("copy", "reverse"):
        default = Path("configs") / f"{args.task}.toml"
        if not default.exists():
            raise ConfigError(f"--task {args.task}: {default} not found; run from the repository root "
                              "or pass --config PATH")
        config = str(default)
    cfg = load_config(config)
    cfg = with_overrides(cfg, "train", task=args.task, steps=args.steps, name=args.name, out_dir=args.out_dir,
                         device=args.device, precision=args.precision, compile=args.compile, seed=args.seed,
                         time_budget_minutes=args.time_budget)
    if cfg.train.task in ("copy", "reverse"):
        cfg = synthetic_config(cfg)
    return cfg


def make_task(cfg: Config, dist: DistInfo, device: torch.device, run_dir: Path) -> Task:
    """The task train.task names (a training.task.TaskFactory): copy/reverse from data, translation from translation."""
    if cfg.train.task == "translation":
        from transformer_min.translation.task import translation_task

        return translation_task(cfg, dist, device, run_dir)
    from transformer_min.data.tasks import synthetic_task

    return synthetic_task(cfg, dist, device, run_dir)


def train(cfg: Config | None, resume: str | None = None, steps: int | None = None,
          time_budget_minutes: float | None = None, overwrite: bool = False) -> tuple[TrainResult, Path]:
    """training.run.train on the task cfg.train.task names (on --resume: the checkpoint's) -> (result, run_dir)."""
    from transformer_min.training import run

    return run.train(cfg, make_task, resume=resume, steps=steps, time_budget_minutes=time_budget_minutes,
                     overwrite=overwrite)


def run_train(args: argparse.Namespace) -> int:
    if args.resume:
        from transformer_min.core.config import load_config
        from transformer_min.core.errors import ConfigError

        if args.overwrite:
            raise ConfigError("--overwrite and --resume exclude each other: --resume continues the run, "
                              "--overwrite deletes it; drop one of them")
        ignored = [flag for flag, value in (("--task", args.task), ("--name", args.name), ("--out-dir", args.out_dir),
                                            ("--device", args.device), ("--precision", args.precision),
                                            ("--compile", args.compile or None), ("--seed", args.seed))
                   if value is not None]
        if ignored:  # they were silently dropped: the run continues under its saved config
            raise ConfigError(f"{', '.join(ignored)} with --resume: a resumed run keeps its own config "
                              f"({args.resume}/config.toml); only --steps and --time-budget extend it; fix: drop "
                              f"{', '.join(ignored)}, or start a new run with them (--name NEW_NAME)")
        cfg = load_config(args.config) if getattr(args, "config", None) else None
        result, run_dir = train(cfg, resume=args.resume, steps=args.steps, time_budget_minutes=args.time_budget)
    else:
        result, run_dir = train(_train_config(args), overwrite=args.overwrite)
    metrics = " ".join(f"{k} {v:.4g}" for k, v in result.last_metrics.items() if isinstance(v, float))
    print(f"run {run_dir}: stopped at step {result.step} ({result.stopped}) after "
          f"{result.train_seconds:.1f} s of training. {metrics}")
    if result.stopped == "interrupted":
        print(f"checkpoint saved; continue with: tmin train --resume {run_dir}")
        return 130
    if result.stopped == "diverged":  # the loss went NaN/inf: not a finished run
        print(f"error: training diverged at step {result.step} (the loss is not finite); fix: lower "
              "train.lr_factor, set train.clip (e.g. 1.0) or raise train.warmup_steps", file=sys.stderr)
        return 1
    return 0


def run_decode(args: argparse.Namespace) -> int:
    import torch

    from transformer_min.decoding.search import beam_search, check_beam, cross_attention_heads, greedy_decode, strip
    from transformer_min.core.errors import ConfigError
    from transformer_min.training.checkpoint import load_model

    try:
        ids = [int(t) for t in args.tokens.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"tokens: expected space-separated integers, got {args.tokens!r}") from None
    if not ids:
        raise ConfigError("tokens: give at least one token id")
    if getattr(args, "config", None):  # the checkpoint's config is used, but a broken file is still an error
        from transformer_min.core.config import load_config

        load_config(args.config)
    model, cfg = load_model(args.checkpoint)
    v = cfg.vocab
    bad = [i for i in ids if not 0 <= i < v.src_size or i in (v.pad_id, v.bos_id)]
    if bad:
        raise ConfigError(f"tokens: id {bad[0]} is not a source symbol (valid: 0..{v.src_size - 1}, "
                          f"not pad {v.pad_id} or bos {v.bos_id})")
    if ids[-1] != v.eos_id:
        ids.append(v.eos_id)
    src = torch.tensor([ids])
    if args.beam and args.beam > 1:
        check_beam(args.beam, v.tgt_size)
        alpha = cfg.decode.length_penalty if args.alpha is None else args.alpha
        out = beam_search(model, src, v.bos_id, v.eos_id, v.pad_id, args.beam, alpha, cfg.decode.max_len_offset,
                          search=cfg.decode.search)
    else:
        out = greedy_decode(model, src, v.bos_id, v.eos_id, v.pad_id, cfg.decode.max_len_offset)
    result = strip(out, v.eos_id, v.pad_id)[0]
    print(" ".join(map(str, result)))
    if args.attention or args.csv:
        heads = cross_attention_heads(model, src, result, v.bos_id, v.eos_id)  # (H, T, S)
    if args.csv:
        from transformer_min.core.matrix_csv import write_cross_attention

        written = write_cross_attention(args.csv, heads, [str(t) for t in [*result, v.eos_id]], [str(t) for t in ids])
        print(f"cross-attention (last layer) -> {len(written)} CSV files in {args.csv}")
    if args.attention:
        att = heads.mean(0)  # (T, S)
        print("\ncross-attention (last layer, mean over heads); rows = output + EOS, columns = source")
        print("      " + " ".join(f"{t:>5d}" for t in ids))
        for tok, row in zip([*result, v.eos_id], att.tolist()):
            print(f"{tok:>5d} " + " ".join(f"{x:5.2f}" for x in row))
    return 0
