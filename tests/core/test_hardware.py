"""hardware.py: precision from the hardware (issue 12), the per-machine attention-kernel choice,
the thread rule. The capability probes are mocked, so these run the same on any CPU."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import pytest
import torch

import transformer_min.core.hardware as hw
from transformer_min.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def fake_cpu(monkeypatch, *, capability="AVX2", avx512_bf16=False, amx=False):
    monkeypatch.setattr(hw, "cpu_capability", lambda: capability)
    monkeypatch.setattr(hw, "_probe", lambda name: {"_is_avx512_bf16_supported": avx512_bf16,
                                                    "_is_amx_tile_supported": amx}[name])


# (capability, AVX512_BF16, AMX) -> what "auto" gives on the CPU
CPU_TABLE = [
    ("AVX2", False, False, "fp32"),
    ("AVX512", False, False, "fp32"),
    ("AVX512", True, False, "bf16"),
    ("AVX512", False, True, "bf16"),
    ("AVX512", True, True, "bf16"),
    ("DEFAULT", False, False, "fp32"),
]


@pytest.mark.parametrize("capability,bf16,amx,want", CPU_TABLE)
def test_auto_on_the_cpu_follows_native_bf16(monkeypatch, capability, bf16, amx, want):
    fake_cpu(monkeypatch, capability=capability, avx512_bf16=bf16, amx=amx)
    p = hw.resolve_precision("auto", "cpu")
    assert (p.requested, p.used, p.warning) == ("auto", want, "")
    assert capability in p.reason
    assert ("native bf16" in p.reason) and (("no native" in p.reason) == (want == "fp32"))


@pytest.mark.parametrize("cuda_bf16,want", [(True, "bf16"), (False, "fp32")])
def test_auto_on_cuda_follows_the_gpu(monkeypatch, cuda_bf16, want):
    monkeypatch.setattr(hw, "cuda_bf16_supported", lambda: cuda_bf16)
    assert hw.resolve_precision("auto", "cuda").used == want


@pytest.mark.parametrize("explicit", ["fp32", "bf16", "fp16"])
def test_explicit_precision_is_kept_everywhere(monkeypatch, explicit):
    fake_cpu(monkeypatch)
    monkeypatch.setattr(hw, "cuda_bf16_supported", lambda: False)
    assert hw.resolve_precision(explicit, "cpu").used == explicit
    assert hw.resolve_precision(explicit, "cuda").used == explicit
    assert hw.resolve_precision(explicit, "cuda").warning == ""


@pytest.mark.parametrize("forced", ["bf16", "fp16"])
def test_forced_half_precision_on_a_cpu_without_bf16_warns_once(monkeypatch, caplog, forced):
    fake_cpu(monkeypatch, capability="AVX2")
    hw._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="transformer_min.core.hardware"):
        assert hw.precision_for(forced, torch.device("cpu")) == forced  # still runs as asked
        assert hw.precision_for(forced, torch.device("cpu")) == forced
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "AVX2" in warnings[0] and "fp32" in warnings[0] and forced in warnings[0]


def test_forced_bf16_on_a_cpu_with_native_bf16_does_not_warn(monkeypatch):
    fake_cpu(monkeypatch, capability="AVX512", amx=True)
    assert hw.resolve_precision("bf16", "cpu").warning == ""


def test_every_shipped_config_leaves_precision_to_the_hardware():
    """No file in configs/ (nor config.toml) forces bf16 or fp16: each says "auto" or says nothing."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    files = sorted((REPO / "configs").glob("*.toml")) + [REPO / "config.toml"]
    assert len(files) >= 5
    for path in files:
        train = tomllib.loads(path.read_text(encoding="utf-8")).get("train", {})
        assert train.get("precision", "auto") == "auto", f"{path.name} forces {train['precision']}"


def test_trainer_uses_the_resolved_precision(monkeypatch, tmp_path):
    """A Trainer on a CPU without native bf16 under "auto" trains in fp32; with AMX in bf16."""
    from tests.training.conftest import tiny_model_and_config
    from transformer_min.training.trainer import Trainer

    import dataclasses

    model, cfg = tiny_model_and_config()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision="auto"))
    for amx, want in ((False, "fp32"), (True, "bf16")):
        fake_cpu(monkeypatch, capability="AVX512", amx=amx)
        trainer = Trainer(cfg, model, source=None, run_dir=tmp_path, device=torch.device("cpu"))
        assert trainer.precision == want


# ---------------------------------------------------------------------------------- attention kernel
@pytest.fixture
def kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    hw.attention_kernel.cache_clear()
    yield tmp_path / "attention_kernels.json"
    hw.attention_kernel.cache_clear()


@pytest.mark.parametrize("fused_ms,matmul_ms,want", [(31.6, 4.1, "matmul"), (3.0, 9.0, "fused")])
def test_half_precision_kernel_is_measured_once_and_cached(monkeypatch, kernel_cache, fused_ms, matmul_ms, want):
    calls = []

    def measure(dtype):
        calls.append(dtype)
        return {"fused_ms": fused_ms, "matmul_ms": matmul_ms, "shape": [1, 1, 1, 1]}

    monkeypatch.setattr(hw, "measure_attention_kernels", measure)
    assert hw.attention_kernel("cpu", torch.bfloat16) == want
    hw.attention_kernel.cache_clear()  # a new process: read from the file, no new measurement
    assert hw.attention_kernel("cpu", torch.bfloat16) == want
    assert calls == [torch.bfloat16]
    cached = json.loads(kernel_cache.read_text())
    (key,) = cached
    assert hw.cpu_capability() in key and "bfloat16" in key and torch.__version__ in key
    assert cached[key]["kernel"] == want


def test_another_machine_measures_again(monkeypatch, kernel_cache):
    monkeypatch.setattr(hw, "measure_attention_kernels",
                        lambda dtype: {"fused_ms": 1.0, "matmul_ms": 2.0, "shape": []})
    fake_cpu(monkeypatch, capability="AVX2")
    assert hw.attention_kernel("cpu", torch.bfloat16) == "fused"
    hw.attention_kernel.cache_clear()
    fake_cpu(monkeypatch, capability="AVX512", amx=True)
    monkeypatch.setattr(hw, "measure_attention_kernels",
                        lambda dtype: {"fused_ms": 9.0, "matmul_ms": 2.0, "shape": []})
    assert hw.attention_kernel("cpu", torch.bfloat16) == "matmul"
    assert len(json.loads(kernel_cache.read_text())) == 2


def test_fp32_and_cuda_never_measure(monkeypatch, kernel_cache):
    monkeypatch.setattr(hw, "measure_attention_kernels", lambda dtype: pytest.fail("measured"))
    assert hw.attention_kernel("cpu", torch.float32) == "fused"
    assert hw.attention_kernel("cuda", torch.bfloat16) == "fused"
    assert not kernel_cache.exists()


def test_a_corrupt_cache_is_measured_again(monkeypatch, kernel_cache):
    kernel_cache.write_text("{not json")
    monkeypatch.setattr(hw, "measure_attention_kernels",
                        lambda dtype: {"fused_ms": 5.0, "matmul_ms": 1.0, "shape": []})
    assert hw.attention_kernel("cpu", torch.float16) == "matmul"
    assert json.loads(kernel_cache.read_text())


def test_the_real_measurement_runs_both_forms():
    m = hw.measure_attention_kernels(torch.bfloat16, shape=(2, 2, 8, 16))
    assert m["fused_ms"] > 0 and m["matmul_ms"] > 0


# ---------------------------------------------------------------------------------- threads, probe
def test_default_threads_never_exceed_the_cpus_we_may_use(monkeypatch):
    before = torch.get_num_threads()
    try:
        hw.default_num_threads.cache_clear()
        monkeypatch.setattr(hw, "available_cpus", lambda: 1)
        assert hw.default_num_threads() == 1
        hw.default_num_threads.cache_clear()
        monkeypatch.setattr(hw, "available_cpus", lambda: 4096)
        assert hw.default_num_threads() == before
    finally:
        hw.default_num_threads.cache_clear()


def test_zero_threads_means_one_count_whatever_was_set_before():
    """num_threads = 0 is the machine's default, not whatever an earlier call left (report used to mean 1)."""
    before = torch.get_num_threads()
    try:
        default = hw.default_num_threads()
        assert 1 <= default <= hw.available_cpus()
        assert hw.apply_num_threads(1) == 1 == torch.get_num_threads()
        assert hw.apply_num_threads(0) == default  # not the 1 left by the call before
        with pytest.raises(ConfigError, match="settings.num_threads = 100,000"):
            hw.apply_num_threads(100_000)
    finally:
        torch.set_num_threads(before)


def test_matmul_probe_counts_flops():
    from transformer_min.core.speed import matmul_gflops

    g = matmul_gflops(torch.float32, seconds=0.05, n=64)
    assert 0.01 < g < 1e6


def test_cpu_info_is_filled():
    info = hw.cpu_info()
    assert info.model and info.capability and info.cores >= 1 and info.torch_threads >= 1
    assert re.match(r"^\S+( AVX512_BF16)?( AMX)?$", info.flags)


@pytest.fixture
def timed_calls(monkeypatch) -> list:
    """core.speed's timings, each run once (not timed for real) and recorded: how many measurements were made."""
    from transformer_min.core import speed

    calls, real = [], speed.median_seconds

    def timing(fn, reps=5):
        calls.append(reps)
        return real(fn, reps=1)

    monkeypatch.setattr(speed, "median_seconds", timing)
    return calls


def test_decode_weight_layout_is_measured_once_per_machine_and_cached(monkeypatch, tmp_path, timed_calls):
    from transformer_min.core import speed

    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.decode_weight_layout.cache_clear()
    calls = timed_calls
    try:
        first = speed.decode_weight_layout()
        speed.decode_weight_layout.cache_clear()  # a new process: read from the file, no new measurement
        assert speed.decode_weight_layout() == first in ("transposed", "linear")
    finally:
        speed.decode_weight_layout.cache_clear()
    assert len(calls) == 2  # the two layouts, timed once
    (entry,) = json.loads((tmp_path / "decode_weight_layout.json").read_text()).values()
    assert entry["layout"] == ("transposed" if entry["transposed_ms"] < entry["linear_ms"] else "linear")


def test_decode_gemm_is_measured_once_per_machine_and_shape_and_cached(monkeypatch, tmp_path, timed_calls):
    from transformer_min.core import speed

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.decode_gemm.cache_clear()
    calls = timed_calls
    monkeypatch.setattr(speed, "decode_weight_layout", lambda: "transposed")  # its own test above
    try:
        first = speed.decode_gemm(32, 48)
        speed.decode_gemm.cache_clear()  # a new process: read from the file, no new measurement
        assert speed.decode_gemm(32, 48) == first in ("onednn", "blas")
        assert len(calls) == 4  # two calls at two row counts, timed once
        speed.decode_gemm(48, 32)  # another shape: measured on its own
        assert len(calls) == 8
        bf16 = speed.decode_gemm(32, 48, torch.bfloat16)  # bf16 decoding's products: measured on their own
        native = hw.cpu_info().native_bf16  # without it oneDNN has no bf16 reorder: the BLAS call, unmeasured
        assert len(calls) == (12 if native else 8) and (native or bf16 == "blas")
    finally:
        speed.decode_gemm.cache_clear()
    entries = json.loads((tmp_path / "decode_gemm.json").read_text())
    assert len(entries) == (3 if native else 2) and any(k.endswith("| 32 x 48") for k in entries)
    assert sum("torch.bfloat16 | 32 x 48" in k for k in entries) == (1 if native else 0)
    for entry in entries.values():
        ratio = math.prod(entry[f"onednn_{r}_ms"] / entry[f"blas_{r}_ms"] for r in (4, 128))
        assert entry["gemm"] == ("onednn" if ratio < 1.0 else "blas")


def test_decode_gemm_bf16_without_native_bf16_is_the_blas_call_unmeasured(monkeypatch, tmp_path, timed_calls):
    """On an AVX2-only CPU oneDNN has no bf16 weight reorder (`_reorder_linear_weight` raised on an AMD EPYC):
    the bf16 choice is the BLAS call there, nothing timed, nothing cached; fp32 is measured as before."""
    from dataclasses import replace

    from transformer_min.core import speed

    avx2 = replace(hw.cpu_info(), capability="AVX2", avx512_bf16=False, amx=False)
    monkeypatch.setattr(speed, "cpu_info", lambda: avx2)
    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.decode_gemm.cache_clear()
    try:
        assert speed.decode_gemm(32, 48, torch.bfloat16) == "blas"
        assert timed_calls == [] and not (tmp_path / "decode_gemm.json").exists()
    finally:
        speed.decode_gemm.cache_clear()


def test_int8_gemm_engines_are_measured_once_per_machine_and_shape_and_cached(monkeypatch, tmp_path, timed_calls):
    from transformer_min.core import speed

    if not {"x86", "onednn"} <= set(torch.backends.quantized.supported_engines):
        pytest.skip("this torch build lacks the x86 or the oneDNN quantized engine")
    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.int8_gemm_engines.cache_clear()
    engine = torch.backends.quantized.engine
    try:
        first = speed.int8_gemm_engines(32, 48, "x86")
        speed.int8_gemm_engines.cache_clear()  # a new process: read from the file, no new measurement
        assert speed.int8_gemm_engines(32, 48, "x86") == first
        assert set(first) <= {"x86", "onednn"} and len(timed_calls) == 4  # two engines at two row counts
        assert speed.int8_gemm_engines(64, 48, "x86") and len(timed_calls) == 8  # another shape: its own
        assert speed.int8_gemm_engines(32, 48, "onednn") == ("onednn", "onednn")  # one candidate: nothing timed
        assert len(timed_calls) == 8 and torch.backends.quantized.engine == engine  # the engine left as it was
    finally:
        speed.int8_gemm_engines.cache_clear()
    entries = json.loads((tmp_path / "int8_gemm.json").read_text())
    assert len(entries) == 2
    for entry in entries.values():
        few, many = entry["engines"].split("/")
        for rows, picked in ((speed.FEW, few), (speed.MANY, many)):
            assert entry[f"{picked}_{rows}_ms"] == min(entry[f"{e}_{rows}_ms"] for e in ("x86", "onednn"))


def test_int8_rows_choice_is_measured_once_per_machine_and_shape_and_cached(monkeypatch, tmp_path, timed_calls):
    """The encoder's int8 product against fp32 (core.speed.int8_rows_faster): timed at both ENCODER_ROWS once per
    machine and shape, read back from int8_rows.json, decided by the product of the two time ratios; no int8 matrix
    product in the build: fp32, nothing timed."""
    from transformer_min.core import speed
    from transformer_min.model.low_precision import RowInt8Linear

    if not speed.int8_rows_available():
        pytest.skip("this torch build has no CPU int8 matrix product (torch._int_mm)")
    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.int8_rows_faster.cache_clear()
    try:
        first = speed.int8_rows_faster(32, 48, RowInt8Linear)
        speed.int8_rows_faster.cache_clear()  # a new process: read from the file, no new measurement
        assert speed.int8_rows_faster(32, 48, RowInt8Linear) == first and len(timed_calls) == 4
        speed.int8_rows_faster(48, 32, RowInt8Linear)
        assert len(timed_calls) == 8  # another shape: its own measurement
        monkeypatch.setattr(speed, "int8_rows_available", lambda: False)
        speed.int8_rows_faster.cache_clear()
        assert speed.int8_rows_faster(64, 64, RowInt8Linear) is False and len(timed_calls) == 8
    finally:
        speed.int8_rows_faster.cache_clear()
    entries = json.loads((tmp_path / "int8_rows.json").read_text())
    assert len(entries) == 2
    for entry in entries.values():
        ratio = math.prod(entry[f"int8_{r}_ms"] / entry[f"fp32_{r}_ms"] for r in speed.ENCODER_ROWS)
        assert entry["encoder"] == ("int8" if ratio < 1.0 else "fp32")


def test_few_query_kernel_is_measured_once_per_machine_and_shape_and_cached(monkeypatch, tmp_path, timed_calls):
    """The step's attention at few rows, fused kernel against the batched products (core.speed.few_query_kernel):
    self- and encoder-decoder attention timed once per machine and head sizes, read back from
    few_query_kernel.json, decided by the product of the two time ratios."""
    from transformer_min.core import speed
    from transformer_min.model.attention import few_query_attention

    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    speed.few_query_kernel.cache_clear()
    try:
        first = speed.few_query_kernel(2, 8, 8, few_query_attention)
        speed.few_query_kernel.cache_clear()  # a new process: read from the file, no new measurement
        assert speed.few_query_kernel(2, 8, 8, few_query_attention) == first and len(timed_calls) == 4
        speed.few_query_kernel(4, 8, 16, few_query_attention)
        assert len(timed_calls) == 8  # other head sizes: their own measurement
    finally:
        speed.few_query_kernel.cache_clear()
    entries = json.loads((tmp_path / "few_query_kernel.json").read_text())
    assert len(entries) == 2
    for entry in entries.values():
        ratio = math.prod(entry[f"fused_{n}_ms"] / entry[f"matmul_{n}_ms"] for n in ("self", "cross"))
        assert entry["kernel"] == ("fused" if ratio < 1.0 else "matmul")


def test_a_measured_choice_weighs_each_case_by_its_time_ratio():
    """core.speed.faster: the product of the time ratios decides (their geometric mean), so a large case does not
    outweigh a small one by its size: 2x slower at 4 rows and 1.5x faster at 128 (1.0 vs 0.5 ms; 300 vs 200 ms)
    picks the other side; and the pick does not depend on which side is named first."""
    from transformer_min.core.speed import faster

    t = {"a_4_ms": 1.0, "b_4_ms": 0.5, "a_128_ms": 200.0, "b_128_ms": 300.0}
    assert faster(t, "a", "b", (4, 128)) == "b"  # ratios 2.0 x 0.67 = 1.33 >= 1
    assert faster(t, "b", "a", (4, 128)) == "b"  # 0.5 x 1.5 = 0.75 < 1
    t["a_4_ms"] = 0.6  # 1.2 x 0.67 = 0.8 < 1
    assert faster(t, "a", "b", (4, 128)) == "a"
    assert faster(t, "b", "a", iter((4, 128))) == "a"  # named the other way round (0.83 x 1.5 = 1.25); any iterable
    # 2x faster at one size, 1.6x slower at the other: a sum of ratios (0.5 + 1.6 = 2.1 >= 2, and 2.0 + 0.625 =
    # 2.625 >= 2) would pick whichever side is named second either way; the product picks `a` both ways
    u = {"a_4_ms": 1.0, "b_4_ms": 2.0, "a_128_ms": 16.0, "b_128_ms": 10.0}
    assert faster(u, "a", "b", (4, 128)) == "a" and faster(u, "b", "a", (4, 128)) == "a"
    assert faster({"a_x_ms": 1.0, "b_x_ms": 1.0}, "a", "b", ["x"]) == "b"  # a tie keeps the second
