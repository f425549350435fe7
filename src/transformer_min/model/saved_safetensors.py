"""A decoding checkpoint as a safetensors file (`tmin average` writes its average so): weights only, no pickle.

A safetensors file is a JSON header (names, dtypes, shapes, offsets, and string metadata) followed by raw
tensor bytes; reading it parses JSON and copies bytes, so loading one runs no code, whatever its author put in
it (docs/security.md). What a torch checkpoint holds beside the weights travels in the header's metadata: the
format tag, the config (JSON), the step and `extra` (JSON). Optimizer and RNG state do not: such a file is for
decoding, averaging and export, never for --resume.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformer_min.core.errors import CheckpointError
from transformer_min.core.i18n import tr

SUFFIX = ".safetensors"


def is_safetensors(path: Path) -> bool:
    """A file named *.safetensors (what we write), read as safetensors whatever its bytes."""
    return Path(path).suffix == SUFFIX


def save_safetensors_checkpoint(state: dict, path: str) -> None:
    """Write `state` (format, config, step, model, extra) to `path` (a temporary file of core.io.atomic_write)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state["model"].items()}  # no shared storage
    meta = {"format": state["format"], "config": json.dumps(state["config"]), "step": str(state["step"]),
            "extra": json.dumps(state.get("extra") or {})}
    save_file(tensors, path, metadata=meta)


def load_safetensors_checkpoint(path: Path, map_location, hint: str) -> dict:
    """The state dict of a safetensors checkpoint (optimizer, scheduler: None); a damaged or foreign file is a
    CheckpointError naming it and `hint`."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt", device=str(map_location)) as f:
            meta = f.metadata() or {}
            model = {k: f.get_tensor(k) for k in f.keys()}
        state = {"format": meta.get("format"), "config": json.loads(meta["config"]), "step": int(meta["step"]),
                 "extra": json.loads(meta.get("extra") or "{}")}
    except KeyError as e:
        raise CheckpointError(tr("{path}: a safetensors file without tmin's {key} entry, so not a transformer-min "
                                 "checkpoint; {hint}").format(path=path, key=e, hint=hint)) from None
    except Exception as e:  # noqa: BLE001 - safetensors' errors (a cut file, a bad header), JSON, int()
        reason = " ".join(str(e).split())[:200]
        raise CheckpointError(tr("{path}: not a readable safetensors checkpoint ({reason}); {hint}").format(
            path=path, reason=reason, hint=hint)) from None
    return {**state, "model": model, "optimizer": None, "scheduler": None}
