"""core/decode_precision.py (issue 37): the decision table of decode.precision, decided from the CPU's
capability (the probes are mocked, so both branches run on any CPU), and int8's refusal where torch has no
quantized engine (the engine list is mocked)."""

from __future__ import annotations

import logging

import pytest
import torch

import transformer_min.core.decode_precision as dp
from transformer_min.core.errors import ConfigError
from tests.core.test_hardware import CPU_TABLE, fake_cpu


@pytest.mark.parametrize("capability,bf16,amx,want", CPU_TABLE)
def test_auto_decodes_in_bf16_exactly_where_the_cpu_has_native_bf16(monkeypatch, capability, bf16, amx, want):
    fake_cpu(monkeypatch, capability=capability, avx512_bf16=bf16, amx=amx)
    p = dp.resolve_decode_precision("auto")
    assert (p.requested, p.used, p.warning) == ("auto", want, "")
    assert capability in p.reason and (("no native" in p.reason) == (want == "fp32"))


@pytest.mark.parametrize("native", [False, True])
def test_fp32_is_fp32_on_every_cpu_and_the_default(monkeypatch, native):
    from transformer_min.core.config import DecodeConfig

    fake_cpu(monkeypatch, capability="AVX512", avx512_bf16=native)
    assert DecodeConfig().precision == "fp32"  # the paper path unless asked
    p = dp.resolve_decode_precision("fp32")
    assert (p.used, p.warning) == ("fp32", "")


def test_explicit_bf16_on_avx2_runs_and_warns_naming_the_capability(monkeypatch):
    fake_cpu(monkeypatch, capability="AVX2")
    p = dp.resolve_decode_precision("bf16", "--precision")
    assert p.used == "bf16" and "AVX2" in p.warning and "--precision" in p.warning and "fp32" in p.warning
    fake_cpu(monkeypatch, capability="AVX512", amx=True)
    assert dp.resolve_decode_precision("bf16").warning == ""


def test_int8_runs_on_the_engine_this_build_has():
    engine = dp.int8_engine()
    assert engine in dp.INT8_ENGINES and engine in torch.backends.quantized.supported_engines
    assert dp.resolve_decode_precision("int8").used == "int8"


class NoEngines:
    """torch.backends.quantized of a build without fbgemm, onednn and qnnpack."""

    supported_engines = ["none"]
    engine = "none"


def test_int8_without_a_quantized_engine_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.backends, "quantized", NoEngines())
    assert dp.int8_engine() is None
    with pytest.raises(ConfigError) as e:
        dp.resolve_decode_precision("int8", "--precision")
    msg = str(e.value)
    assert "--precision" in msg and "quantized engine" in msg and "none" in msg and "fix:" in msg


def test_an_unknown_value_is_named():
    with pytest.raises(ConfigError, match=r"decode.precision = 'int4'.*fp32, auto, bf16, int8"):
        dp.resolve_decode_precision("int4")


def test_load_translator_resolves_auto_from_the_capability(monkeypatch, caplog):
    """translation.translate.decode_precision: --precision wins over decode.precision; auto follows the mocked
    capability; the choice is logged."""
    from transformer_min.core.config import Config
    from transformer_min.translation.translate import decode_precision

    cfg = Config()
    fake_cpu(monkeypatch, capability="AVX2")
    assert decode_precision(cfg, None) == "fp32"
    assert decode_precision(cfg, "auto") == "fp32"
    fake_cpu(monkeypatch, capability="AVX512", avx512_bf16=True)
    with caplog.at_level(logging.INFO, logger="transformer_min.translation.translate"):
        assert decode_precision(cfg, "auto") == "bf16"
    assert any("bf16" in r.getMessage() and "AVX512_BF16" in r.getMessage() for r in caplog.records)
    assert decode_precision(cfg, "int8") == "int8"
