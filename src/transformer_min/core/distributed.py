"""PyTorch's own distributed engine (torchrun + DistributedDataParallel), never a home-made one.

`torchrun --nproc_per_node N -m transformer_min train ...` sets RANK, WORLD_SIZE and LOCAL_RANK;
`init_distributed` reads them and starts the process group: gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import datetime
import logging

import os
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.distributed as dist
from torch import nn

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_int(env: Mapping[str, str], name: str, default: int, low: int, high: int | None = None) -> int:
    """Integer environment variable `name` in [low, high) (no `high`: any from `low` up); unset or empty: `default`.
    Anything else is a ConfigError naming the variable, its value and the fix."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value >= high):
        bound = (tr("an integer from {low} up").format(low=low) if high is None else
                 tr("an integer in [{low}, {high}) (WORLD_SIZE = {high})").format(low=low, high=high))
        raise ConfigError(tr("environment variable {name}={raw!r} is not {bound}; fix: unset RANK, WORLD_SIZE and "
                             "LOCAL_RANK to train in one process, or start the processes with torchrun (torchrun "
                             "--nproc_per_node N -m transformer_min train ...), which sets them").format(
            name=name, raw=env[name], bound=bound))
    return value


def env_world(env: Mapping[str, str] | None = None) -> DistInfo:
    """RANK, WORLD_SIZE and LOCAL_RANK as torchrun sets them, checked (no traceback for WORLD_SIZE=two, RANK=-1 or
    RANK >= WORLD_SIZE); a single process (rank 0 of 1) without them."""
    env = os.environ if env is None else env
    world = env_int(env, "WORLD_SIZE", 1, 1)
    return DistInfo(env_int(env, "RANK", 0, 0, world), world, env_int(env, "LOCAL_RANK", 0, 0, world))


def env_rank() -> int:
    """This process's rank as torchrun sets it (RANK), before any process group exists; 0 without torchrun."""
    return env_world().rank


def init_distributed(device_type: str) -> DistInfo:
    """Start the process group when launched by torchrun (WORLD_SIZE > 1); else a single process."""
    info = env_world()
    if info.world_size <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    if device_type == "cuda":
        torch.cuda.set_device(info.local_rank)
    return info


def device_for(requested: str, info: DistInfo, where: str = "") -> torch.device:
    """--device auto|cpu|cuda -> torch.device (the local GPU under torchrun); `where`: the source of
    train.device as a refusal's prefix (`core.config.origin_of`)."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(tr("{where}train.device = 'cuda': no CUDA device is available on this machine; fix: set train.device = 'auto' or 'cpu' (or --device cpu)").format(where=where))
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def wrap_model(model: nn.Module, info: DistInfo, device: torch.device) -> nn.Module:
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def all_reduce_sum(value: int, device: torch.device, info: DistInfo) -> int:
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t)
    return int(t.item())


def broadcast_flag(flag: bool, device: torch.device, info: DistInfo) -> bool:
    """Rank 0's decision (e.g. early stop) for every rank."""
    if not info.enabled:
        return flag
    t = torch.tensor([int(flag)], device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def gather_objects(obj, info: DistInfo) -> list:
    """Every rank's `obj` (picklable; CPU tensors inside are fine), in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo, ok: bool = True) -> None:
    """Leave the process group. After a normal end every rank first waits for the others (rank 0 may
    still be writing the last checkpoint): a rank that tore its group down and exited while another
    was still in it left that one hanging in the group's teardown. After an error, no wait."""
    if info.enabled and dist.is_initialized():
        if ok:
            try:
                if dist.get_backend() == "gloo":
                    dist.monitored_barrier(timeout=datetime.timedelta(minutes=10))
                else:
                    dist.barrier()
            except RuntimeError as e:  # a rank that failed: leave anyway
                log.warning(tr("ranks did not meet before shutdown: %s"), e)
        dist.destroy_process_group()
