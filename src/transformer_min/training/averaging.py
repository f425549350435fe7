"""Checkpoint averaging, section 6.1: "averaging the last 5 checkpoints".

The average is written as safetensors (checkpoints/averaged.safetensors): its weights, and the config, step
and `extra` in the file's metadata; loading it runs no code (model/saved_safetensors.py). An --out named *.pt
is written as before, with torch.save (scripts that name their averages so keep working)."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_min.core.errors import CheckpointError, ConfigError, TminError
from transformer_min.core.io import atomic_write, check_replaceable
from transformer_min.model.saved import list_checkpoints, read_checkpoint
from transformer_min.model.saved_safetensors import SUFFIX, is_safetensors, save_safetensors_checkpoint
from transformer_min.core.i18n import tr


DEFAULT_NAME = "averaged" + SUFFIX


def average_states(states: list[dict]) -> dict:
    """Element-wise mean of the model tensors of several checkpoints (same architecture)."""
    first = states[0]
    keys = list(first["model"])
    fix = tr("average checkpoints of one run only (move the others out of its checkpoints/ folder)")
    for s in states[1:]:
        missing = [k for k in keys if k not in s["model"]] + [k for k in s["model"] if k not in first["model"]]
        if missing:
            raise CheckpointError(tr("cannot average {get} and {get2}: tensor '{missing}' is in only one of them; {fix}").format(get=first.get('path'), get2=s.get('path'), missing=missing[0], fix=fix))
        for k in keys:
            a, b = first["model"][k], s["model"][k]
            if a.shape != b.shape:
                raise CheckpointError(tr("cannot average {get} and {get2}: tensor '{k}' has shape {tuple} in the first and {tuple2} in the second; {fix}").format(get=first.get('path'), get2=s.get('path'), k=k, tuple=tuple(a.shape), tuple2=tuple(b.shape), fix=fix))
    avg = {}
    for k in keys:
        ref = states[0]["model"][k]
        if ref.is_floating_point():
            avg[k] = sum(s["model"][k].double() for s in states).div(len(states)).to(ref.dtype)
        else:
            avg[k] = ref.clone()
    return avg


def check_average_out(out: Path) -> None:
    """Refuse an --out that would replace anything but an earlier average: a step checkpoint, best.pt, a
    config or any other file is never overwritten (a typo must not cost a file); a folder is named."""
    if out.is_dir():
        raise CheckpointError(tr("--out {out}: is a folder; fix: give a file path such as {out2}").format(out=out, out2=out / DEFAULT_NAME))

    def previous(p: Path) -> bool:
        try:
            return "averaged" in (read_checkpoint(p).get("extra") or {})
        except TminError:
            return False

    try:
        check_replaceable(out, "--out", tr("an earlier tmin average"), previous,
                          fix=tr("choose a new --out (e.g. {path}) or delete the file first").format(
                              path=out.with_name(DEFAULT_NAME)))
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def average_run(run_dir: Path, last: int = 5, out: Path | None = None) -> tuple[Path, list[Path]]:
    """Average the newest `last` step checkpoints of run_dir -> checkpoints/averaged.safetensors (or `out`)."""
    if last < 1:
        raise CheckpointError(tr("--last must be >= 1, got {last}").format(last=last))
    out = Path(out) if out else Path(run_dir) / "checkpoints" / DEFAULT_NAME
    check_average_out(out)
    paths = list_checkpoints(run_dir)[-last:]
    if not paths:
        if Path(run_dir).is_file():
            raise CheckpointError(tr("{run_dir}: is a checkpoint file; tmin average takes the run directory that holds it; fix: tmin average {parent}").format(run_dir=run_dir, parent=Path(run_dir).parent.parent))
        raise CheckpointError(tr("{run_dir}: no step checkpoints to average (runs/<name>/checkpoints/step_*.pt)").format(run_dir=run_dir))
    states = [read_checkpoint(p) for p in paths]
    result = dict(states[-1])
    result.pop("path", None)
    result["model"] = average_states(states)
    result["optimizer"] = result["scheduler"] = None  # an average is for decoding, not for resuming
    result["extra"] = {**states[-1].get("extra", {}), "averaged": [p.name for p in paths]}
    if is_safetensors(out):
        atomic_write(out, lambda tmp: save_safetensors_checkpoint(result, tmp))
    else:
        atomic_write(out, lambda tmp: torch.save(result, tmp))
    return out, paths
