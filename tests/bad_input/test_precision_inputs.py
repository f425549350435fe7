"""The bad-input corpus of decoding's precision (issue 37): `--precision` of tmin translate/eval and of
benchmarks/bench_translate.py, and config.toml's `decode.precision`.

Same project and rules as test_file_inputs: no traceback, a non-zero exit, a message naming the thing and the
fix, nothing that existed changed. A torch build without a quantized engine is made by a sitecustomize module
that empties torch.backends.quantized.supported_engines in the child process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case
from tests.bad_input.test_file_inputs import MT_TOML, project, workdir  # noqa: F401  (fixtures)

SRC = str(Path(__file__).resolve().parents[2] / "src")
NO_ENGINE = {"PYTHONPATH": "no_quantized_engine" + os.pathsep + SRC}  # relative: the case's folder


def without_quantized_engine(tmp: Path) -> None:
    shim = tmp / "no_quantized_engine"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import torch.backends.quantized as q\n"
        "type(q).supported_engines = property(lambda self: ['none'])  # a build without fbgemm/onednn/qnnpack\n"
        "type(q).engine = property(lambda self: 'none', lambda self, value: None)\n")


def config_with(line: str):
    def setup(tmp: Path) -> None:
        (tmp / "bad.toml").write_text(MT_TOML.replace("[decode]\n", f"[decode]\n{line}\n"))
    return setup


TRANSLATE = ["translate", "--checkpoint", "runs/mt"]
BENCH = ("benchmarks/bench_translate.py",)
CASES = [
    Case("translate-precision-unknown", [*TRANSLATE, "--precision", "int4", "ein hund ."],
         ["--precision", "'int4'", "int8", "bf16"]),
    Case("eval-precision-unknown", ["eval", "--checkpoint", "runs/mt", "--precision", "fp8"],
         ["--precision", "'fp8'", "int8"]),
    Case("set-decode-precision-unknown", [*TRANSLATE, "--set", "decode.precision=int4", "ein hund ."],
         ["decode.precision", "int4", "int8"]),
    Case("config-decode-precision-unknown", ["eval", "--checkpoint", "runs/mt", "--config", "bad.toml"],
         ["decode.precision", "int4", "int8"], config_with('precision = "int4"')),
    Case("config-decode-precision-not-a-string", ["eval", "--checkpoint", "runs/mt", "--config", "bad.toml"],
         ["decode.precision", "8"], config_with("precision = 8")),
    Case("translate-precision-with-ctranslate2", ["translate", "--engine", "ctranslate2", "--model", "ct2",
                                                  "--precision", "int8", "ein hund ."],
         ["--precision int8", "--engine torch", "fix:", "--compute-type"]),
    Case("translate-int8-without-quantized-engine", [*TRANSLATE, "--precision", "int8", "ein hund ."],
         ["--precision", "int8", "no quantized engine", "fix:", "fp32 or bf16"], without_quantized_engine,
         env=NO_ENGINE),
    Case("set-decode-precision-int8-without-quantized-engine",
         [*TRANSLATE, "--set", "decode.precision=int8", "ein hund ."],
         ["decode.precision", "int8", "no quantized engine", "fix:"], without_quantized_engine, env=NO_ENGINE),
    Case("bench-precision-unknown", ["--checkpoint", "runs/mt", "--precision", "int8,int4"],
         ["--precision", "'int4'", "fp32, auto, bf16, int8"], program=BENCH),
    Case("bench-int8-without-quantized-engine", ["--checkpoint", "runs/mt", "--precision", "int8"],
         ["--precision", "int8", "no quantized engine", "fix:"], without_quantized_engine, env=NO_ENGINE,
         program=BENCH),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_precision_input(case, workdir):
    proc = check_case(case, workdir)
    print(f"{case.id}: {proc.stderr.strip()}")  # the message, for reading with pytest -rP


def test_the_shim_does_not_hide_a_working_int8(workdir):
    """The same int8 translation without the shim runs: the refusal above is the missing engine's, not the
    command's."""
    from tests.bad_input.harness import run_tmin

    proc = run_tmin([*TRANSLATE, "--precision", "int8", "ein hund ."], workdir)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]
    assert "decoding in int8" in proc.stderr


def measured_over_broken_cache(monkeypatch, tmp_path, file: str, key: str, content: str, measure):
    """`measure()` (a core.speed choice, its lru_cache cleared before and after) with `file` in TMIN_CACHE_DIR
    holding `content` (KEY: `key`); -> (its result, the file's entries afterwards, which must be valid JSON)."""
    import json

    monkeypatch.setenv("TMIN_CACHE_DIR", str(tmp_path))
    (tmp_path / file).write_text(content.replace("KEY", key.replace('"', '\\"')))
    measure.cache_clear()
    try:
        return measure(), json.loads((tmp_path / file).read_text())
    finally:
        measure.cache_clear()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"KEY": "x86/onednn"}', '{"KEY": {"engines": "avx/none"}}'])
def test_a_broken_int8_gemm_cache_is_measured_again_and_rewritten(monkeypatch, tmp_path, content):
    """int8_gemm.json (core.speed.int8_gemm_engines, read by int8 decoding) that is not JSON, not a mapping, or
    holds an entry that is not a measurement or names engines that are not candidates: measured again, no
    traceback, the file rewritten as valid JSON holding the new measurement."""
    import functools

    import torch

    from transformer_min.core import speed

    if not {"x86", "onednn"} <= set(torch.backends.quantized.supported_engines):
        pytest.skip("this torch build lacks the x86 or the oneDNN quantized engine")
    key = speed.int8_gemm_key(32, 48, ("x86", "onednn"))
    measure = functools.partial(speed.int8_gemm_engines, 32, 48, "x86")
    measure.cache_clear = speed.int8_gemm_engines.cache_clear
    (few, many), entries = measured_over_broken_cache(monkeypatch, tmp_path, "int8_gemm.json", key, content, measure)
    assert {few, many} <= {"x86", "onednn"}
    assert entries[key]["engines"] == f"{few}/{many}" and f"{few}_4_ms" in entries[key]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"KEY": "int8"}', '{"KEY": {"encoder": "int4"}}'])
def test_a_broken_int8_rows_cache_is_measured_again_and_rewritten(monkeypatch, tmp_path, content):
    """int8_rows.json (core.speed.int8_rows_faster, read by int8 decoding's encoder) that is not JSON, not a
    mapping, or holds an entry that is not a measurement or names no choice: measured again, no traceback, the
    file rewritten as valid JSON holding the new measurement."""
    import functools

    import torch

    from transformer_min.core import speed
    from transformer_min.model.low_precision import RowInt8Linear

    if not speed.int8_rows_available():
        pytest.skip("this torch build has no CPU int8 matrix product (torch._int_mm)")
    key = f"{speed.machine_key(torch.float32)} | 32 x 48 | form {speed.ROW_INT8_FORM}"
    measure = functools.partial(speed.int8_rows_faster, 32, 48, RowInt8Linear)
    measure.cache_clear = speed.int8_rows_faster.cache_clear
    faster, entries = measured_over_broken_cache(monkeypatch, tmp_path, "int8_rows.json", key, content, measure)
    assert entries[key]["encoder"] == ("int8" if faster else "fp32") and "int8_16_ms" in entries[key]


def test_an_int8_rows_entry_of_an_earlier_product_form_is_measured_again(monkeypatch, tmp_path):
    """An int8_rows.json entry written before the product changed (the key without `ROW_INT8_FORM`, as d9f7f07
    wrote it) says nothing about today's product: measured again under the new key, the old entry left as it was."""
    import functools

    import torch

    from transformer_min.core import speed
    from transformer_min.model.low_precision import RowInt8Linear

    if not speed.int8_rows_available():
        pytest.skip("this torch build has no CPU int8 matrix product (torch._int_mm)")
    old = f"{speed.machine_key(torch.float32)} | 32 x 48"
    stale = '{"KEY": {"int8_16_ms": 9.0, "fp32_16_ms": 1.0, "int8_512_ms": 9.0, "fp32_512_ms": 1.0, "encoder": "fp32"}}'
    measure = functools.partial(speed.int8_rows_faster, 32, 48, RowInt8Linear)
    measure.cache_clear = speed.int8_rows_faster.cache_clear
    faster, entries = measured_over_broken_cache(monkeypatch, tmp_path, "int8_rows.json", old, stale, measure)
    new = f"{old} | form {speed.ROW_INT8_FORM}"
    assert new in entries and entries[new]["int8_16_ms"] != 9.0
    assert entries[new]["encoder"] == ("int8" if faster else "fp32")
    assert entries[old]["encoder"] == "fp32" and entries[old]["int8_16_ms"] == 9.0


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"KEY": "fused"}', '{"KEY": {"kernel": "flash"}}'])
def test_a_broken_few_query_kernel_cache_is_measured_again_and_rewritten(monkeypatch, tmp_path, content):
    """few_query_kernel.json (core.speed.few_query_kernel, read by every decoding step's attention) that is not
    JSON, not a mapping, or holds an entry that is not a measurement or names no kernel: measured again, no
    traceback, the file rewritten as valid JSON holding the new measurement."""
    import functools

    import torch

    from transformer_min.core import speed
    from transformer_min.model.attention import few_query_attention

    key = f"{speed.machine_key(torch.float32)} | 2 heads x 8, 8"
    measure = functools.partial(speed.few_query_kernel, 2, 8, 8, few_query_attention)
    measure.cache_clear = speed.few_query_kernel.cache_clear
    kernel, entries = measured_over_broken_cache(monkeypatch, tmp_path, "few_query_kernel.json", key, content, measure)
    assert entries[key]["kernel"] == kernel in ("fused", "matmul") and "fused_self_ms" in entries[key]
