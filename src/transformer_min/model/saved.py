"""Reading a checkpoint: the file checked, its embedded config, the model it describes (no training needed).

A checkpoint is a `torch.save` of plain containers and tensors (training/checkpoint.py writes it), read back
with `torch.load(weights_only=True)`: no pickled code runs, and a file that is not one of ours is named with
what it is (model/saved_scan.py). It embeds the resolved config, so decoding rebuilds the exact model
(`load_model`, `model_from_state`). Everything that decodes a checkpoint (translation, export, explore, report)
reads it here, below training; saving, pruning and the RNG state stay in training/checkpoint.py.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_min.core.config import Config, config_from_dict, config_to_dict
from transformer_min.core.errors import CheckpointError, ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.messages import shorten
from transformer_min.model.saved_safetensors import is_safetensors, load_safetensors_checkpoint
from transformer_min.model.saved_scan import diagnose
from transformer_min.model.transformer import Transformer, build_model

log = logging.getLogger(__name__)

FORMAT = "transformer-min/1"
CKPT_RE = re.compile(r"^step_(\d+)\.pt$")


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DistributedDataParallel and/or torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def clean_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """Strip `module.` (DDP) and `_orig_mod.` (torch.compile) prefixes."""
    out = {}
    for key, value in state.items():
        while key.startswith(("module.", "_orig_mod.")):
            key = key.split(".", 1)[1]
        out[key] = value
    return out


CHECKPOINT_HINT = "pass a file written by tmin train or tmin average (runs/<name>/checkpoints/*.pt) or the run directory"
REQUIRED = {"model": dict, "config": dict, "step": int}  # what decoding and resuming cannot do without


def _load_file(path: Path, map_location) -> dict:
    if not path.exists():
        raise CheckpointError(tr("{path}: checkpoint not found; {hint}").format(path=path, hint=tr(CHECKPOINT_HINT)))
    if not path.is_file():
        raise CheckpointError(tr("{path}: not a file; {hint}").format(path=path, hint=tr(CHECKPOINT_HINT)))
    if is_safetensors(path):  # tmin average's: weights and metadata, no pickle
        state = load_safetensors_checkpoint(path, map_location, tr(CHECKPOINT_HINT))
    else:
        state = _torch_load(path, map_location)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(tr("{path}: not a transformer-min checkpoint (format {format} expected); {hint}").format(
            path=path, format=FORMAT, hint=tr(CHECKPOINT_HINT)))
    for key, kind in REQUIRED.items():
        if not isinstance(state.get(key), kind):
            if key not in state:
                template = tr("{path}: the checkpoint has no '{key}' entry, so it can be neither decoded nor resumed; "
                              "use another checkpoint of the run (runs/<name>/checkpoints/*.pt)")
            else:
                template = tr("{path}: the checkpoint has a {kind} as its '{key}' entry, so it can be neither decoded "
                              "nor resumed; use another checkpoint of the run (runs/<name>/checkpoints/*.pt)")
            raise CheckpointError(template.format(path=path, key=key, kind=type(state.get(key)).__name__))
    state["path"] = str(path)
    return state


def _torch_load(path: Path, map_location) -> dict:
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the diagnosis below says more
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated, not a checkpoint, or holds code
        try:
            why = diagnose(path, e)
        except OSError as oe:
            why = tr("cannot read the file ({reason})").format(reason=oe.strerror)
        raise CheckpointError(tr("{path}: {why}; {hint}").format(path=path, why=why, hint=tr(CHECKPOINT_HINT))) from None


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint file, or a run directory's newest readable step checkpoint.

    For a run directory, an unreadable newest file (cut by a full disk, a bad copy) is skipped with a
    warning naming it, and the previous checkpoint is used.
    """
    path = Path(path)
    if not path.is_dir():
        return _load_file(path, map_location)
    ckpts = list_checkpoints(path)
    if not ckpts and path.name == "checkpoints" and any(path.glob("step_*.pt")):
        raise CheckpointError(tr("{path}: is the checkpoints folder of a run; fix: pass the run directory {parent} (its "
                                 "newest checkpoint) or one file such as {example}").format(
            path=path, parent=path.parent, example=sorted(path.glob('step_*.pt'))[-1]))
    if not ckpts:
        raise CheckpointError(tr("{path}: no checkpoint found (expected {path}/checkpoints/step_*.pt); pass a run "
                                 "directory that tmin train has checkpointed, or a checkpoint file").format(path=path))
    first_error = None
    for newest in reversed(ckpts):
        try:
            state = _load_file(newest, map_location)
        except CheckpointError as e:
            first_error = first_error or e
            log.warning("%s", tr("{error}; skipping it").format(error=e))
            continue
        if first_error is not None:
            log.warning("%s", tr("using the previous checkpoint {path} (delete the unreadable newer one to silence this)"
                                ).format(path=newest))
        return state
    raise CheckpointError(tr("{error} (and no earlier step checkpoint of {path} is readable)").format(
        error=first_error, path=path))


def config_differences(saved: Config, current: Config, sections=("model", "vocab")) -> list[str]:
    """Fields of `sections` whose values differ: ["model.d_model: checkpoint 64, config 128", ...]."""
    a, b = config_to_dict(saved), config_to_dict(current)
    return [tr("{key}: checkpoint {saved!r}, config {current!r}").format(key=f"{s}.{k}", saved=a[s][k], current=b[s].get(k))
            for s in sections for k in a[s] if a[s][k] != b[s].get(k)]


def checkpoint_config(state: dict) -> Config:
    config = state["config"]
    train = config.get("train") if isinstance(config, dict) else None
    if isinstance(train, dict) and "loss_kernel" not in train:
        # a checkpoint from before train.loss_kernel was trained through the paper path: it resumes so
        config = {**config, "train": {**train, "loss_kernel": "paper"}}
    try:
        return config_from_dict(config, source=f"checkpoint {state.get('path', '')}")
    except ConfigError as e:
        raise CheckpointError(tr("{path}: embedded config is invalid: {error} (the file was altered; use another "
                                 "checkpoint of the run)").format(path=state.get('path', 'checkpoint'), error=e)) from None


def load_model_state(model: nn.Module, state: dict) -> None:
    """Load weights, turning shape or key mismatches into a CheckpointError naming the tensor."""
    try:
        unwrap(model).load_state_dict(clean_state_dict(state["model"]))
    except RuntimeError as e:
        raise CheckpointError(tr("{path}: weights do not fit the model its config describes ({reason}); the file was "
                                 "altered or mixed from two runs: use another checkpoint of the run").format(
            path=state.get('path', 'checkpoint'), reason=shorten(e, 300))) from None


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu",
               expect: Config | None = None):
    """Rebuild the model a checkpoint was trained with -> (model in eval mode, Config).

    With `expect`, a model/vocab config that disagrees with the checkpoint's is an error naming
    each differing field.
    """
    state = read_checkpoint(path)
    cfg = checkpoint_config(state)
    if expect is not None:
        diffs = config_differences(cfg, expect)
        if diffs:
            raise CheckpointError(tr("{path}: checkpoint and config disagree: {diffs}").format(
                path=state['path'], diffs="; ".join(diffs)))
    return model_from_state(state, device), cfg


def model_from_state(state: dict, device: str | torch.device = "cpu") -> Transformer:
    """The model of a checkpoint already read (`read_checkpoint`), in eval mode: its config built, its weights loaded."""
    model = build_model(checkpoint_config(state))
    load_model_state(model, state)
    return model.to(device).eval()


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """step_*.pt files of a run, oldest first."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := CKPT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None
