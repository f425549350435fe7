"""Set up and run training from a Config: the run directory, the batch source, the evaluator."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path, PurePath

import torch

from transformer_min.core.config import Config, config_to_dict, with_overrides
from transformer_min.core.errors import CheckpointError, ConfigError
from transformer_min.core.hardware import check_num_threads, default_num_threads
from transformer_min.core import distributed as dist_utils
from transformer_min.data import tasks
from transformer_min.core.io import TMP_RE, atomic_write_text, remove_stale_temp_files
from transformer_min.training.checkpoint import (
    CKPT_RE,
    checkpoint_dir,
    checkpoint_config,
    config_differences,
    list_checkpoints,
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
    from transformer_min.decoding.search import greedy_decode, strip
    from transformer_min.data.batch import pad_sequences

    pairs = tasks.eval_set(task, n, seed)
    correct = 0
    for i in range(0, n, batch_size):
        chunk = pairs[i:i + batch_size]
        src = pad_sequences([s + [tasks.EOS_ID] for s, _ in chunk], tasks.PAD_ID).to(device)
        out = strip(greedy_decode(model, src, tasks.BOS_ID, tasks.EOS_ID, tasks.PAD_ID, max_len_offset),
                    tasks.EOS_ID, tasks.PAD_ID)
        correct += sum(o == want for o, (_, want) in zip(out, chunk))
    return correct / n


RUN_FILES = ("config.toml", "metrics.jsonl", "metrics.png", "spm.model")  # what a run writes beside checkpoints/


def make_run_dir(cfg: Config) -> Path:
    """out_dir/name; a name that would leave out_dir ("..", an absolute path) is refused."""
    name = cfg.train.name or f"{cfg.train.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(cfg.train.out_dir)
    parts = PurePath(name).parts
    run_dir = out / name
    inside = bool(parts) and not PurePath(name).is_absolute() and ".." not in parts
    if inside:  # a symlink inside out_dir may still lead out of it
        base = out.resolve()
        inside = run_dir.resolve() != base and run_dir.resolve().is_relative_to(base)
    if not inside:
        raise ConfigError(f"train.name (--name): {name!r} leaves train.out_dir {str(out)!r} (the run would be "
                          f"written to {run_dir.resolve()}); use a plain name such as 'copy-2', and --out-dir to "
                          "choose where runs go")
    return run_dir


def holds_run(run_dir: Path) -> bool:
    """Whether run_dir has anything of an earlier run (config, metrics, checkpoints)."""
    ckpts = checkpoint_dir(run_dir)
    return any((run_dir / f).exists() for f in RUN_FILES[:2]) or (
        ckpts.is_dir() and any(not TMP_RE.match(p.name) for p in ckpts.iterdir()))


def check_new_run_dir(run_dir: Path, overwrite: bool) -> None:
    """A new run never mixes with an earlier one: refuse a run directory that holds one, unless --overwrite."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"train.name (--name): {run_dir} exists and is not a folder; choose another --name")
    if overwrite or not holds_run(run_dir):
        return
    n = len(list_checkpoints(run_dir))
    raise ConfigError(f"{run_dir} already holds a run ({n} step checkpoints); nothing was changed. Continue it "
                      f"with: tmin train --resume {run_dir}; or choose another --name; or pass --overwrite to "
                      "delete it and start again")


def clear_run(run_dir: Path) -> None:
    """--overwrite: remove what an earlier run wrote (checkpoints, config, metrics, vocabulary, hypotheses)."""
    import shutil

    shutil.rmtree(checkpoint_dir(run_dir), ignore_errors=True)
    for p in [*(run_dir / f for f in RUN_FILES), *run_dir.glob("hyp.*")]:
        p.unlink(missing_ok=True)
    log.warning("--overwrite: removed the earlier run in %s", run_dir)


def create_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"train.out_dir (--out-dir): cannot create the run directory {run_dir} "
                          f"({e.strerror}); choose a folder you can write to") from None


RESUMABLE = ("steps", "time_budget_minutes")  # the train fields --resume may change


def adopt_config_edits(run_dir: Path, saved: Config, steps, time_budget_minutes) -> Config:
    """The run's config.toml against the checkpoint's config, before --resume rewrites it.

    An edit of train.steps or train.time_budget_minutes (what --resume may change) is used unless the
    command line gives the value; any other edit is refused, naming the field: resuming would silently
    ignore it and overwrite the file.
    """
    from transformer_min.core.config import load_config

    path = run_dir / "config.toml"
    if not path.is_file():
        return saved
    try:
        on_disk = config_to_dict(load_config(path))
    except ConfigError as e:
        raise ConfigError(f"{e}; --resume rewrites {path} from the checkpoint: fix the file or delete it") from None
    ours = config_to_dict(saved)
    edited = [(s, k) for s in ours for k in ours[s] if ours[s][k] != on_disk.get(s, {}).get(k)]
    other = [f"{s}.{k} (file {on_disk.get(s, {}).get(k)!r}, checkpoint {ours[s][k]!r})"
             for s, k in edited if not (s == "train" and k in RESUMABLE)]
    if other:
        raise ConfigError(f"{path}: edited since the checkpoint: {'; '.join(other)}. --resume continues with the "
                          "checkpoint's config (only --steps and --time-budget change it) and would overwrite the "
                          f"edit; undo it or delete {path.name}, or start a new run from the edited file: "
                          f"tmin train --config {path} --name NEW_NAME")
    cli = {"steps": steps, "time_budget_minutes": time_budget_minutes}
    adopted = {k: on_disk["train"][k] for s, k in edited if cli[k] is None}
    for k, v in adopted.items():
        log.info("--resume: train.%s = %r from %s", k, v, path)
    return with_overrides(saved, "train", **adopted)


def prepare(cfg: Config, dist: dist_utils.DistInfo, device: torch.device, run_dir: Path):
    """Model, batch source and evaluator for cfg.train.task."""
    from transformer_min.model.transformer import build_model

    task = cfg.train.task
    if task in tasks.TASKS:
        source = tasks.SyntheticTask(task, cfg.train.batch_tokens, cfg.train.seed, dist.rank)
        evaluator = SyntheticEvaluator(task, cfg.train.seed, device)
    elif task == "translation":
        from transformer_min.data.pipeline import translation_setup
        from transformer_min.translation.evaluate import TranslationEvaluator  # until translation/task.py lands

        source, prepared = translation_setup(cfg, run_dir, dist, device)
        evaluator = TranslationEvaluator(cfg, prepared, device)
    else:  # pragma: no cover - Literal-validated
        raise ConfigError(f"train.task: unknown task {task!r}")
    torch.manual_seed(cfg.train.seed)
    return build_model(cfg), source, evaluator


def train(cfg: Config | None, resume: str | None = None, steps: int | None = None, time_budget_minutes: float | None
          = None, overwrite: bool = False, num_threads: int = 0) -> tuple[TrainResult, Path]:
    """Train under cfg (or continue the run at `resume`); return the result and the run directory.

    On resume the checkpoint's config is used; a `cfg` given as well must agree with it on the
    model and vocabulary; `steps` and `time_budget_minutes` (total, counting the time already
    trained) may extend the run, and so may an edit of those two fields in the run's config.toml.
    A new run refuses a run directory that holds one, unless `overwrite`. num_threads: settings.json's (0: auto).
    """
    if resume:
        if not Path(resume).exists():
            raise CheckpointError(f"--resume {resume}: no such run directory or checkpoint; give the runs/<name> "
                                  "folder of an earlier tmin train")
        if Path(resume).is_dir() and holds_run(Path(resume)) and not list_checkpoints(Path(resume)):
            raise CheckpointError(f"--resume {resume}: the run stopped before its first checkpoint, so there is "
                                  "nothing to resume; start it again with --overwrite (same --name)")
        state = read_checkpoint(resume)
        saved = checkpoint_config(state)
        if cfg is not None:
            diffs = config_differences(saved, cfg)
            if diffs:
                raise CheckpointError(f"{state['path']}: --resume with a config that disagrees with the "
                                      "checkpoint: " + "; ".join(diffs) + " (drop --config to use the saved one)")
        if not Path(resume).is_dir() and Path(state["path"]).parent.name != "checkpoints":
            raise CheckpointError(f"--resume {resume}: the file is not in a run's checkpoints/ folder, so there is "
                                  "no run directory to continue (its config.toml, metrics and checkpoints would be "
                                  "written beside it); fix: --resume runs/<name> (the run directory)")
        if state.get("optimizer") is None:
            raise CheckpointError(f"--resume {resume}: {Path(state['path']).name} has no optimizer state (an "
                                  "average of checkpoints is for decoding); fix: --resume the run directory, which "
                                  "continues from its newest step checkpoint")
        run_dir = Path(resume) if Path(resume).is_dir() else Path(state["path"]).parent.parent
        later = [p for p in list_checkpoints(run_dir) if int(CKPT_RE.match(p.name).group(1)) > int(state.get("step", 0))]
        if not Path(resume).is_dir() and later:  # going back would overwrite the later checkpoints
            raise CheckpointError(f"--resume {resume}: the run {run_dir} has later checkpoints ({later[-1].name}), "
                                  "which resuming from this older one would overwrite; nothing was changed; fix: "
                                  f"--resume {run_dir} continues from the newest, or copy the run folder first to "
                                  "branch from this step")
        cfg = adopt_config_edits(run_dir, saved, steps, time_budget_minutes)
        cfg = with_overrides(cfg, "train", steps=steps, time_budget_minutes=time_budget_minutes)
        done = int(state.get("step", 0))
        if done >= cfg.train.steps:  # nothing to train: rewriting its files would only cost the old ones
            raise CheckpointError(f"--resume {resume}: the run already reached step {done:,} of train.steps = "
                                  f"{cfg.train.steps:,}; nothing was changed; fix: give a larger --steps "
                                  f"(e.g. --steps {2 * done}) to train on")
    else:
        state = None
        run_dir = make_run_dir(cfg)
        check_new_run_dir(run_dir, overwrite)
    from transformer_min.model.transformer import check_batch_memory

    check_num_threads(num_threads, "settings.num_threads")
    check_batch_memory(cfg)  # before any tensor: a batch that cannot fit is the config's fault, not torch's
    torch.set_num_threads(num_threads or default_num_threads())  # settings.json num_threads; 0: from the machine
    dist = dist_utils.init_distributed("cuda" if cfg.train.device == "cuda" or (
        cfg.train.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        if dist.is_main:
            if overwrite and state is None and holds_run(run_dir):
                clear_run(run_dir)
            removed = remove_stale_temp_files(run_dir, checkpoint_dir(run_dir))
            if removed:
                log.info("removed %d temporary files left by an interrupted save: %s", len(removed),
                         ", ".join(p.name for p in removed))
        device = dist_utils.device_for(cfg.train.device, dist)
        model, source, evaluator = prepare(cfg, dist, device, run_dir)
        trainer = Trainer(cfg, model, source, run_dir, device, evaluator, dist)
        if state is not None:
            trainer.restore(state)
            log.info("resumed %s at step %d", state["path"], trainer.step)
        if dist.is_main:
            create_run_dir(run_dir)
            atomic_write_text(run_dir / "config.toml", to_toml(config_to_dict(cfg)))
            log.info("run directory %s (%s, %d parameters)", run_dir, device,
                     sum(p.numel() for p in model.parameters()))
        try:
            result = trainer.fit()
        except RuntimeError as e:  # the allocator's own error, past the estimate's lower bound
            if "can't allocate memory" not in str(e) and "out of memory" not in str(e).lower():
                raise
            raise ConfigError(f"train.batch_tokens = {cfg.train.batch_tokens:,}: training ran out of memory on "
                              f"{device}; fix: lower train.batch_tokens (train.accum_steps keeps the effective "
                              "batch) or the [model] sizes") from None
    finally:
        dist_utils.shutdown(dist, ok=sys.exc_info()[0] is None)
    return result, run_dir
