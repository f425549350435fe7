"""What this machine can do, decided from its capabilities, never from constants timed elsewhere.

The paper trained in fp32 on P100s (section 5.2). Mixed precision only pays where the hardware does bf16
natively (CUDA GPUs from Ampere on, CPUs with AVX512_BF16 or AMX tiles); elsewhere a bf16 autocast is emulated,
many times slower, so `precision = "auto"` picks fp32 there (an explicit bf16/fp16 runs but warns once).

The rules, all read from the machine:
- `resolve_precision`: the decision table of train.precision (tested with the probes mocked).
- `apply_num_threads`: the one call that sets torch's threads; 0 = `default_num_threads`, torch's own default
  (its count of physical cores) bounded by the CPUs this process may run on (`os.sched_getaffinity`).
- `attention_kernel`: which form of eq. (1) is faster for a (device, dtype); measured once and cached.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_min.core.errors import ConfigError
from transformer_min.core.io import atomic_write_text
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------- the CPU
@dataclass(frozen=True)
class CpuInfo:
    model: str  # "Intel(R) Xeon(R) ..." from /proc/cpuinfo, else platform.processor()
    capability: str  # torch's kernel dispatch level: "AVX2", "AVX512", "DEFAULT", ...
    avx512_bf16: bool
    amx: bool
    cores: int  # CPUs this process may run on
    torch_threads: int

    @property
    def native_bf16(self) -> bool:
        """bf16 matmuls in hardware: AVX512_BF16 instructions or AMX tiles."""
        return self.avx512_bf16 or self.amx

    @property
    def flags(self) -> str:
        """e.g. "AVX512 AVX512_BF16 AMX" (what a bug report needs)."""
        names = [self.capability] + [n for n, on in (("AVX512_BF16", self.avx512_bf16), ("AMX", self.amx)) if on]
        return " ".join(names)


def _probe(name: str) -> bool:
    """A private torch.cpu probe (present since torch 2.1); False where this build lacks it."""
    fn = getattr(torch.cpu, name, None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # noqa: BLE001 - a probe that fails means "not known to be there"
        return False


def cpu_capability() -> str:
    """torch's CPU dispatch level ("AVX2", "AVX512", "DEFAULT", "ZVECTOR", ...)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001
        return "unknown"


def _cpuinfo_field(*names: str) -> str | None:
    """The first /proc/cpuinfo line whose key starts with one of `names` (Linux); None elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(names):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo_field("model name", "hardware") or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU's instruction-set flags as the kernel reports them (avx2, avx512f, amx_tile, ...)."""
    return set((_cpuinfo_field("flags") or "").split())


def available_cpus() -> int:
    """CPUs this process may run on: the affinity mask where the OS has one, else os.cpu_count()."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_info() -> CpuInfo:
    return CpuInfo(model=cpu_model(), capability=cpu_capability(),
                   avx512_bf16=_probe("_is_avx512_bf16_supported"), amx=_probe("_is_amx_tile_supported"),
                   cores=available_cpus(), torch_threads=torch.get_num_threads())


MAX_THREADS_PER_CPU = 4


def check_num_threads(n: int, field: str) -> None:
    """ConfigError naming `field` when `n` threads are far more than the CPUs (torch starts all; 100,000 crash)."""
    cpus = available_cpus()
    if n > MAX_THREADS_PER_CPU * cpus:
        raise ConfigError(tr("{field} = {n:,}: more than {MAX_THREADS_PER_CPU} threads per CPU ({cpus} CPUs here); fix: set it to at most {cpus} (or 0 for torch's default)").format(field=field, n=n, MAX_THREADS_PER_CPU=MAX_THREADS_PER_CPU, cpus=cpus))


@functools.cache
def default_num_threads() -> int:
    """What `num_threads = 0` means everywhere: torch's default (its count of physical cores, read once, before
    `apply_num_threads` changes it) bounded by the CPUs this process may use (a 2-CPU container on 64 cores: 2)."""
    return max(1, min(torch.get_num_threads(), available_cpus()))


def apply_num_threads(n: int, field: str = "settings.num_threads") -> int:
    """The one place torch's thread count is set: `n` (checked; `field` names it), 0 = `default_num_threads()`."""
    check_num_threads(n, field)
    torch.set_num_threads(n or default_num_threads())
    return torch.get_num_threads()


# ---------------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_gib: float
    capability: str  # "9.0"
    bf16: bool


def gpu_info() -> list[GpuInfo]:
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(GpuInfo(i, p.name, round(p.total_memory / 2**30, 1), f"{p.major}.{p.minor}", p.major >= 8))
    return out


def cuda_bf16_supported() -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    except Exception:  # noqa: BLE001
        return False


# ---------------------------------------------------------------------------------- precision
@dataclass(frozen=True)
class Precision:
    """What train.precision resolved to on this device, and why (printed by `tmin doctor`)."""

    requested: str  # auto | fp32 | bf16 | fp16
    used: str  # fp32 | bf16 | fp16
    reason: str
    warning: str = ""  # non-empty: the request runs, but slowly here


def resolve_precision(requested: str, device: torch.device | str) -> Precision:
    """The decision table of `train.precision` (section 5.2 trained in fp32; mixed precision is ours).

    auto on CUDA: bf16 where the GPU supports it (compute capability 8.0+), else fp32.
    auto on the CPU: bf16 where the CPU does it natively (AVX512_BF16 or AMX), else fp32.
    fp32/bf16/fp16 given: used as given; bf16/fp16 on a CPU without native bf16 warns.
    """
    device = torch.device(device)
    if device.type == "cuda":
        if requested != "auto":
            return Precision(requested, requested, tr("set in train.precision"))
        if cuda_bf16_supported():
            return Precision("auto", "bf16", tr("the GPU supports bf16"))
        return Precision("auto", "fp32", tr("the GPU has no bf16 (compute capability < 8.0)"))
    info = cpu_info()
    if requested == "auto":
        if info.native_bf16:
            return Precision("auto", "bf16", tr("the CPU has native bf16 ({flags})").format(flags=info.flags))
        return Precision("auto", "fp32", tr("the CPU has no native bf16 (capability {flags}; neither AVX512_BF16 nor "
                                            "AMX)").format(flags=info.flags))
    warning = ""
    if requested in ("bf16", "fp16") and not info.native_bf16:
        warning = tr("train.precision = \"{requested}\" on a CPU without native bf16 (capability {flags}; neither "
                     "AVX512_BF16 nor AMX): autocast is emulated here and may be many times slower than fp32. Set "
                     "train.precision = \"auto\" or \"fp32\" (or --precision auto).").format(requested=requested,
                                                                                          flags=info.flags)
    return Precision(requested, requested, tr("set in train.precision"), warning)


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    log.warning(message)


def precision_for(requested: str, device: torch.device | str) -> str:
    """resolve_precision(...).used, logging its warning once per process."""
    p = resolve_precision(requested, device)
    if p.warning:
        _warn_once(p.warning)
    return p.used


# ---------------------------------------------------------------------------------- the attention kernel
def cache_dir() -> Path:
    """$TMIN_CACHE_DIR, else $XDG_CACHE_HOME/transformer_min, else ~/.cache/transformer_min."""
    if os.environ.get("TMIN_CACHE_DIR"):
        return Path(os.environ["TMIN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer_min"


def machine_key(dtype: torch.dtype) -> str:
    """What a speed measurement depends on: CPU model and capability, torch, threads, dtype."""
    info, torch_release = cpu_info(), importlib.metadata.version("torch")
    return f"{info.model} | {info.flags} | torch {torch_release} | {info.torch_threads} threads | {dtype}"


def median_seconds(fn, reps: int = 5) -> float:
    """Median wall time of `fn` over `reps` calls, after one warm-up call."""
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def measure_attention_kernels(dtype: torch.dtype, shape: tuple[int, int, int, int] = (16, 4, 32, 64)) -> dict:
    """Forward + backward of eq. (1) at a translation-sized shape (B, H, L, d_k), both ways:
    PyTorch's fused `scaled_dot_product_attention` and the two matmuls written out. Median of 5."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g).to(dtype).requires_grad_() for _ in range(3))

    def fused():
        F.scaled_dot_product_attention(q, k, v).float().sum().backward()

    def matmuls():
        s = (q @ k.transpose(-2, -1)) / shape[-1] ** 0.5
        (torch.softmax(s, -1, dtype=torch.float32).to(dtype) @ v).float().sum().backward()

    return {"fused_ms": median_seconds(fused) * 1e3, "matmul_ms": median_seconds(matmuls) * 1e3, "shape": list(shape)}


@functools.lru_cache(maxsize=None)
def attention_kernel(device_type: str, dtype: torch.dtype) -> str:
    """"fused" or "matmul": the faster form of eq. (1) on this machine for `dtype`.

    CUDA, and fp32/float64 anywhere: "fused" (PyTorch's own dispatch picks flash, memory-efficient or
    math kernels there). bf16/fp16 on the CPU: measured once per machine (`machine_key`) and cached in
    `cache_dir()/attention_kernels.json`; on one AMX CPU the fused kernel was 7.7x slower at
    translation lengths, which is why this is not left to a default.
    """
    if device_type != "cpu" or dtype not in (torch.bfloat16, torch.float16):
        return "fused"

    def measure() -> dict:
        with torch.inference_mode(False), torch.enable_grad(), torch.autocast("cpu", enabled=False):
            entry = measure_attention_kernels(dtype)
        entry["kernel"] = "fused" if entry["fused_ms"] <= entry["matmul_ms"] else "matmul"
        return entry

    return measured_choice("attention_kernels.json", machine_key(dtype), "kernel", ("fused", "matmul"), measure)


def measured_choice(file: str, key: str, field: str, choices: tuple[str, ...], measure) -> str:
    """A speed choice measured once per machine (`key`, e.g. `machine_key`) and cached in `cache_dir()/file`:
    the cached entry's `field` when it is one of `choices`, else that of `measure()` (a dict holding `field`
    and its timings, in ms), stored and logged. A read-only home measures again next time."""
    path = cache_dir() / file
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    entry = cached.get(key)
    if isinstance(entry, dict) and entry.get(field) in choices:
        return entry[field]
    entry = measure()
    cached[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(cached, indent=1))
    except OSError as e:
        log.debug("could not cache the measured choice in %s: %s", path, e)
    timings = ", ".join(f"{k} {v:.3f}" for k, v in entry.items() if k.endswith("_ms"))
    log.info(tr("%s on this machine: %s (%s; cached in %s)"), file.removesuffix(".json"), entry[field], timings, path)
    return entry[field]
