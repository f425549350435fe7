"""`tmin doctor`: one screen a user can paste into a bug report.

Python, the torch build, the CPU (model, capability, cores, threads), GPUs, a ~2 s matmul probe,
what `precision = "auto"` resolves to here and why, the config and settings files found, the LLM
channel (the key only as `sk-…abcd`), and the data directory. `--json` prints the same for machines.
It always exits 0: what is wrong is listed under warnings, for the reader to act on.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from transformer_min.cli.argtypes import seconds_up_to
from transformer_min.core.figure import figure_fonts, figure_fonts_line
from transformer_min.core.i18n import tr
from transformer_min.core.textwidth import pad

WIDTH = 18  # label column

MAX_PROBE_SECONDS = 60.0  # a longer probe measures nothing new and looks like a hang


def add_parsers(sub, parents) -> None:
    p = sub.add_parser("doctor", parents=parents, help="this machine, torch build, precision and files: for a bug report",
                       description="Print Python, torch build, CPU capability, GPUs, a matmul probe, what "
                                   "precision 'auto' resolves to, the config/settings files, the channel and the data.")
    p.add_argument("--json", action="store_true", help="print JSON instead of the screen")
    p.add_argument("--probe-seconds", type=seconds_up_to(MAX_PROBE_SECONDS), default=1.0, metavar="S",
                   help="seconds for each matmul probe (fp32, bf16; default 1.0; 0 skips the probe; "
                        f"at most {MAX_PROBE_SECONDS:g})")
    p.set_defaults(func=run_doctor, config_errors="report", needs_config=False)


# ---------------------------------------------------------------------------------- collection
def torch_build() -> dict:
    import torch

    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = f"CUDA {cuda}" if cuda else (f"ROCm {hip}" if hip else "CPU")
    return {"version": importlib.metadata.version("torch"), "build": build, "cuda_available": torch.cuda.is_available()}


def cpu_section() -> dict:
    from transformer_min.core.hardware import cpu_flags, cpu_info

    info = cpu_info()
    flags = cpu_flags()
    return {"model": info.model, "capability": info.capability,
            "avx2": info.capability in ("AVX2", "AVX512") or "avx2" in flags,
            "avx512": info.capability == "AVX512" or "avx512f" in flags,
            "avx512_bf16": info.avx512_bf16, "amx": info.amx, "native_bf16": info.native_bf16,
            "cores": info.cores, "logical_cpus": os.cpu_count(), "torch_threads": info.torch_threads}


def probe(seconds: float, native_bf16: bool, gpus: list) -> dict:
    """fp32 and bf16 matmul GFLOP/s on the CPU (and the first GPU), about `seconds` each."""
    import torch

    from transformer_min.core.speed import matmul_gflops

    if seconds <= 0:
        return {}
    n = 1024 if native_bf16 else 512  # emulated bf16 is slow: keep one matmul well under a second
    out = {"cpu": {"n": n, "fp32": round(matmul_gflops(torch.float32, seconds, n), 1),
                   "bf16": round(matmul_gflops(torch.bfloat16, seconds, n), 1)}}
    if gpus:
        out["cuda"] = {"n": 4096, "fp32": round(matmul_gflops(torch.float32, seconds, 4096, "cuda"), 1),
                       "bf16": round(matmul_gflops(torch.bfloat16, seconds, 4096, "cuda"), 1)}
    return out


def config_section(args: argparse.Namespace, warnings: list[str]) -> tuple[dict, object | None]:
    """The config file and whether it loaded; (section, the loaded Project or None)."""
    from transformer_min.cli.common import project_of
    from transformer_min.core.config import resolve_config_path

    path = resolve_config_path(getattr(args, "config", None))
    out = {"path": str(path), "found": path.is_file()}
    error = getattr(args, "project_error", None)
    if error is not None:  # main kept the loader's error for this screen
        warnings.append(tr("config: {error}").format(error=error))
        out["error"] = str(error)
        return out, None
    project = project_of(args)
    if project.config_path is None:
        out["note"] = tr("not found: the built-in paper defaults are used")
    return out, project


def precision_section(cfg, gpus: list, warnings: list[str]) -> dict:
    from transformer_min.core.hardware import resolve_precision

    out = {"auto": {}}
    for device in ["cpu"] + (["cuda"] if gpus else []):
        p = resolve_precision("auto", device)
        out["auto"][device] = {"precision": p.used, "reason": p.reason}
    if cfg is not None:
        t = cfg.train
        device = "cuda" if t.device == "cuda" or (t.device == "auto" and gpus) else "cpu"
        p = resolve_precision(t.precision, device)
        out["config"] = {"train.precision": t.precision, "train.device": t.device, "device": device,
                         "precision": p.used, "reason": p.reason}
        if p.warning:
            warnings.append(p.warning)
    return out


def settings_section(args: argparse.Namespace) -> dict:
    from transformer_min.core.config import DEFAULT_SETTINGS_NAME

    path = Path(getattr(args, "settings", None) or DEFAULT_SETTINGS_NAME)
    return {"path": str(path), "found": path.is_file()}


def channel_section(project, warnings: list[str]) -> dict:
    """The channel as it would be used: protocol, base URL, model, and the key redacted (or none)."""
    from transformer_min.channel.schema import channel_part
    from transformer_min.channel.settings import resolve_channel
    from transformer_min.core.errors import TminError

    if project is None:
        return {"error": tr("not loaded: the config or settings above has an error")}
    try:
        s = resolve_channel(channel_part(project), require_key=False)
    except TminError as e:
        warnings.append(tr("channel: {error}").format(error=e))
        return {"error": str(e)}
    return {"protocol": s.protocol, "base_url": s.base_url, "model": s.model,
            "key": s.key_hint if s.api_key else "none", "key_source": s.sources.get("api_key", "")}


def data_section(cfg) -> dict:
    from transformer_min.core.config import DataConfig
    from transformer_min.data.text import split_path
    from transformer_min.core.errors import TminError

    d = cfg.data if cfg is not None else DataConfig()
    out = {"data_dir": d.data_dir, "track": d.track, "exists": Path(d.data_dir).is_dir()}
    missing = []
    for split in (d.train_split, d.valid_split, d.test_split):
        for lang in (d.src_lang, d.tgt_lang):
            try:
                split_path(d, split, lang)
            except TminError:
                missing.append(f"{split}.{lang}")
    out["multi30k"] = "found" if not missing else "missing: " + ", ".join(missing)
    return out


def collect(args: argparse.Namespace, probe_seconds: float = 1.0) -> dict:
    from transformer_min.core.hardware import gpu_info

    warnings: list[str] = []
    torch_info = torch_build()
    cpu = cpu_section()
    gpus = [g.__dict__ for g in gpu_info()]
    if torch_info["build"].startswith("CUDA") and not gpus:
        warnings.append(tr("torch is a {build} build but no GPU is visible: it runs on the CPU; a CPU-only build "
                           "is much smaller (README: Which torch you get)").format(build=torch_info["build"]))
    if cpu["torch_threads"] > cpu["cores"]:
        warnings.append(tr("torch uses {threads} threads on {cores} CPUs: set settings.json num_threads or "
                           "OMP_NUM_THREADS").format(threads=cpu["torch_threads"], cores=cpu["cores"]))
    config, project = config_section(args, warnings)
    cfg = project.config if project is not None else None
    info = {
        "python": {"version": ".".join(map(str, sys.version_info[:3])), "executable": sys.executable,
                   "platform": platform.platform()},
        "torch": torch_info, "cpu": cpu, "gpus": gpus,
        "matmul_gflops": probe(probe_seconds, cpu["native_bf16"], gpus),
        "precision": precision_section(cfg, gpus, warnings),
        "files": {"config": config, "settings": settings_section(args)},
        "channel": channel_section(project, warnings),
        "data": data_section(cfg),
        "figures": figure_fonts(),  # is there a CJK font: --lang zh figures in Chinese, or English (no boxes)
    }
    info["warnings"] = warnings
    return info


# ---------------------------------------------------------------------------------- the screen
def _yes(flag: bool) -> str:
    return tr("yes") if flag else tr("no")


def capability_text(c: dict) -> str:
    """The value of the capability line: torch's dispatch level and the instruction sets precision depends on."""
    return (f"{c['capability']}: AVX2 {_yes(c['avx2'])}, AVX512 {_yes(c['avx512'])}, "
            f"AVX512_BF16 {_yes(c['avx512_bf16'])}, AMX {_yes(c['amx'])}")


def doctor_cpu_lines() -> str:
    """The CPU and capability lines of `tmin doctor`, as it prints them: what a benchmark's figures depend on
    (every benchmark prints them first; issue 37)."""
    c = cpu_section()
    return "\n".join(f"{pad(tr(label), WIDTH)} {value}" for label, value in
                     (("CPU", c["model"]), ("capability", capability_text(c))))


def render(info: dict) -> str:
    c, t = info["cpu"], info["torch"]
    rows = [
        ("Python", f"{info['python']['version']} ({info['python']['executable']})"),
        ("platform", info["python"]["platform"]),
        ("torch", tr("{version}, {build} build").format(version=t["version"], build=t["build"])
         + (tr(", CUDA available") if t["cuda_available"] else "")),
        ("CPU", c["model"]),
        ("capability", capability_text(c)),
        ("cores", tr("{cores} usable of {logical}; torch threads {threads}").format(
            cores=c["cores"], logical=c["logical_cpus"], threads=c["torch_threads"])),
        ("GPUs", "; ".join(f"{g['index']}: {g['name']}, {g['memory_gib']} GiB, sm {g['capability']}"
                           for g in info["gpus"]) or tr("none")),
    ]
    for dev, m in info["matmul_gflops"].items():
        rows.append((tr("matmul {device}").format(device=dev), f"fp32 {m['fp32']:.1f} GFLOP/s, bf16 {m['bf16']:.1f} GFLOP/s (n = {m['n']})"))
    for dev, p in info["precision"]["auto"].items():
        rows.append((tr("auto on {device}").format(device=dev), f"{p['precision']}: {p['reason']}"))
    pc = info["precision"].get("config")
    if pc:
        rows.append((tr("config precision"), tr("train.precision = {precision!r} on {device} -> {used}").format(
            precision=pc["train.precision"], device=pc["device"], used=pc["precision"])))
    for name, f in info["files"].items():
        state = tr("found") if f["found"] else tr("not found")
        rows.append((tr("{name} file").format(name=name), f"{f['path']} ({state})" + (f"; {f['note']}" if f.get("note") else "")))
    ch = info["channel"]
    rows.append(("channel", ch["error"] if "error" in ch else
                 tr("{protocol} {base_url}, model {model}, key {key}").format(
                     protocol=ch["protocol"], base_url=ch["base_url"], model=ch["model"],
                     key=tr("none") if ch["key"] == "none" else ch["key"])
                 + (f" ({tr(ch['key_source'])})" if ch["key"] == "none" else "")))
    d = info["data"]
    found = d["multi30k"] == "found"
    state = tr("found") if found else tr("missing: {files}").format(files=d["multi30k"].partition(": ")[2])
    hint = "" if found else tr("; set data.data_dir to your copy (docs/translation.md)")
    rows.append(("data", f"{d['data_dir']} ({d['track']}): Multi30k {state}{hint}"))
    rows.append(("figures", figure_fonts_line(info["figures"])))
    lines = [f"{pad(tr(label), WIDTH)} {value}" for label, value in rows]  # by columns: CJK is two
    ws = info["warnings"]
    lines.append(f"{pad(tr('warnings'), WIDTH)} {len(ws) if ws else tr('none')}")
    lines += [f"  - {w}" for w in ws]
    return "\n".join(lines)


def run_doctor(args: argparse.Namespace) -> int:
    info = collect(args, args.probe_seconds)
    print(json.dumps(info, indent=2) if args.json else render(info))
    return 0
