"""--resume: which checkpoint and run directory to continue, under which config, and the refusals that keep
a resume from silently doing something else (another model, an older step, a finished run, an edit)."""

from __future__ import annotations

import logging
from pathlib import Path

from transformer_min.core.config import Config, config_to_dict, with_overrides
from transformer_min.core.errors import CheckpointError, ConfigError
from transformer_min.model.saved import (
    CKPT_RE,
    checkpoint_config,
    config_differences,
    list_checkpoints,
    read_checkpoint,
)
from transformer_min.training.run_dir import holds_run
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


RESUMABLE = ("steps", "time_budget_minutes")  # the train fields --resume may change


def adopt_config_edits(run_dir: Path, saved: Config, steps, time_budget_minutes) -> Config:
    """The run's config.toml against the checkpoint's config, before --resume rewrites it.

    An edit of train.steps or train.time_budget_minutes (what --resume may change) is used unless the
    command line gives the value; any other edit is refused, naming the field: resuming would silently
    ignore it and overwrite the file.
    """
    from transformer_min.core.config import build_config, read_config_file

    path = run_dir / "config.toml"
    if not path.is_file():
        return saved
    try:
        on_disk = config_to_dict(build_config(read_config_file(path, {}), str(path)))  # the run's own file
    except ConfigError as e:
        raise ConfigError(tr("{e}; --resume rewrites {path} from the checkpoint: fix the file or delete it").format(e=e, path=path)) from None
    ours = config_to_dict(saved)
    edited = [(s, k) for s in ours for k in ours[s] if ours[s][k] != on_disk.get(s, {}).get(k)]
    other = [f"{s}.{k} (file {on_disk.get(s, {}).get(k)!r}, checkpoint {ours[s][k]!r})"
             for s, k in edited if not (s == "train" and k in RESUMABLE)]
    if other:
        raise ConfigError(tr("{path}: edited since the checkpoint: {items}. --resume continues with the checkpoint's config (only --steps and --time-budget change it) and would overwrite the edit; undo it or delete {name}, or start a new run from the edited file: tmin train --config {path} --name NEW_NAME").format(path=path, items='; '.join(other), name=path.name))
    cli = {"steps": steps, "time_budget_minutes": time_budget_minutes}
    adopted = {k: on_disk["train"][k] for s, k in edited if cli[k] is None}
    for k, v in adopted.items():
        log.info(tr("--resume: train.%s = %r from %s"), k, v, path)
    return with_overrides(saved, "train", **adopted)


def check_resume_target(resume: str) -> None:
    """Before reading anything: the path exists and the run got as far as a checkpoint."""
    if not Path(resume).exists():
        raise CheckpointError(tr("--resume {resume}: no such run directory or checkpoint; give the runs/<name> folder of an earlier tmin train").format(resume=resume))
    if Path(resume).is_dir() and holds_run(Path(resume)) and not list_checkpoints(Path(resume)):
        raise CheckpointError(tr("--resume {resume}: the run stopped before its first checkpoint, so there is nothing to resume; start it again with --overwrite (same --name)").format(resume=resume))


def check_resumable_state(resume: str, state: dict, saved: Config, cfg: Config | None) -> Path:
    """The checkpoint can be continued where it lies -> the run directory to continue."""
    if cfg is not None:
        diffs = config_differences(saved, cfg)
        if diffs:
            raise CheckpointError(tr("{path}: --resume with a config that disagrees with the checkpoint: ").format(path=state['path']) + "; ".join(diffs) + tr(" (drop --config to use the saved one)"))
    if not Path(resume).is_dir() and Path(state["path"]).parent.name != "checkpoints":
        raise CheckpointError(tr("--resume {resume}: the file is not in a run's checkpoints/ folder, so there is no run directory to continue (its config.toml, metrics and checkpoints would be written beside it); fix: --resume runs/<name> (the run directory)").format(resume=resume))
    if state.get("optimizer") is None:
        raise CheckpointError(tr("--resume {resume}: {name} has no optimizer state (an average of checkpoints is for decoding); fix: --resume the run directory, which continues from its newest step checkpoint").format(resume=resume, name=Path(state['path']).name))
    run_dir = Path(resume) if Path(resume).is_dir() else Path(state["path"]).parent.parent
    done = int(state.get("step", 0))
    later = [p for p in list_checkpoints(run_dir) if int(CKPT_RE.match(p.name).group(1)) > done]
    if not Path(resume).is_dir() and later:  # going back would overwrite the later checkpoints
        raise CheckpointError(tr("--resume {resume}: the run {run_dir} has later checkpoints ({name}), which resuming from this older one would overwrite; nothing was changed; fix: --resume {run_dir} continues from the newest, or copy the run folder first to branch from this step").format(resume=resume, run_dir=run_dir, name=later[-1].name))
    return run_dir


def open_resume(resume: str, cfg: Config | None, steps: int | None,
                time_budget_minutes: float | None) -> tuple[dict, Config, Path]:
    """-> (checkpoint state, the config to continue under, the run directory).

    The checkpoint's config is used; a `cfg` given as well must agree with it on the model and
    vocabulary; `steps` and `time_budget_minutes` (total, counting the time already trained) may
    extend the run, and so may an edit of those two fields in the run's config.toml.
    """
    check_resume_target(resume)
    state = read_checkpoint(resume)
    saved = checkpoint_config(state)
    run_dir = check_resumable_state(resume, state, saved, cfg)
    cfg = adopt_config_edits(run_dir, saved, steps, time_budget_minutes)
    cfg = with_overrides(cfg, "train", steps=steps, time_budget_minutes=time_budget_minutes)
    done = int(state.get("step", 0))
    if done >= cfg.train.steps:  # nothing to train: rewriting its files would only cost the old ones
        raise CheckpointError(tr("--resume {resume}: the run already reached step {done:,} of train.steps = {steps:,}; nothing was changed; fix: give a larger --steps (e.g. --steps {value}) to train on").format(resume=resume, done=done, steps=cfg.train.steps, value=2 * done))
    return state, cfg, run_dir
