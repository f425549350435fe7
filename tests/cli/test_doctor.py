"""`tmin doctor` (issue 12): one pasteable screen, --json for machines, always exit 0, warnings listed.
The capability probes are mocked: these assert the AVX2-only answer on any CPU."""

from __future__ import annotations

import json

import pytest

import transformer_min.core.hardware as hw
from transformer_min.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

KEY = "sk-test0123456789abcdefWXYZ"


@pytest.fixture
def avx2_only(monkeypatch):
    """A CPU like the issue's: capability AVX2, neither AVX512_BF16 nor AMX, no GPU."""
    monkeypatch.setattr(hw, "cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(hw, "_probe", lambda name: False)
    monkeypatch.setattr(hw, "gpu_info", lambda: [])
    monkeypatch.setattr(hw, "cpu_flags", lambda: {"fpu", "sse2", "avx", "avx2", "fma"})
    monkeypatch.delenv("TMIN_API_KEY", raising=False)
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)


def doctor_json(capsys, *args) -> dict:
    assert main(["doctor", "--json", "--probe-seconds", "0.02", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_doctor_on_a_cpu_without_bf16(avx2_only, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "--probe-seconds", "0.02"]) == 0
    screen = capsys.readouterr().out
    assert "AVX2: AVX2 yes, AVX512 no, AVX512_BF16 no, AMX no" in screen
    assert "auto on cpu        fp32: the CPU has no native bf16" in screen
    info = doctor_json(capsys)
    assert info["cpu"]["capability"] == "AVX2" and info["cpu"]["native_bf16"] is False
    assert info["precision"]["auto"]["cpu"]["precision"] == "fp32"
    assert info["precision"]["config"]["precision"] == "fp32"  # built-in defaults say "auto"
    assert info["matmul_gflops"]["cpu"]["fp32"] > 0 and info["matmul_gflops"]["cpu"]["bf16"] > 0
    assert info["gpus"] == [] and info["warnings"] == []
    assert info["files"]["config"]["found"] is False and info["files"]["settings"]["found"] is False
    assert info["channel"]["key"] == "none"


def test_forced_bf16_on_a_cpu_without_it_is_a_warning_not_a_failure(avx2_only, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[train]\nprecision = "bf16"\n')
    info = doctor_json(capsys, "--config", str(cfg))
    assert info["precision"]["config"] == {"train.precision": "bf16", "train.device": "auto", "device": "cpu",
                                           "precision": "bf16", "reason": "set in train.precision"}
    (warning,) = info["warnings"]
    assert "AVX2" in warning and "fp32" in warning


def test_cuda_build_without_a_gpu_is_a_warning(avx2_only, tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    info = doctor_json(capsys)
    assert info["torch"]["build"] == "CUDA 12.8"
    assert any("CUDA 12.8 build but no GPU" in w for w in info["warnings"])


def test_a_broken_config_is_listed_and_doctor_still_exits_0(avx2_only, tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[model\n")
    info = doctor_json(capsys, "--config", str(cfg))
    assert "error" in info["files"]["config"] and any("bad.toml" in w for w in info["warnings"])


def test_the_key_is_shown_redacted_and_never_in_full(avx2_only, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMIN_API_KEY", KEY)
    assert main(["doctor", "--probe-seconds", "0"]) == 0
    screen = capsys.readouterr().out
    info = doctor_json(capsys)
    for text in (screen, json.dumps(info)):
        assert KEY not in text and KEY[3:-4] not in text
    assert info["channel"]["key"].endswith("WXYZ") and info["channel"]["key"].startswith("sk-")
    assert info["channel"]["base_url"].startswith("https://")


def test_data_directory_with_multi30k(avx2_only, tmp_path, capsys):
    import gzip

    data = tmp_path / "m30k"
    (data / "tok").mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            with gzip.open(data / "tok" / f"{split}.lc.norm.tok.{lang}.gz", "wt") as f:
                f.write("a b\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[data]\ndata_dir = "{data}"\n')
    assert doctor_json(capsys, "--config", str(cfg))["data"]["multi30k"] == "found"
    (data / "tok" / "val.lc.norm.tok.en.gz").unlink()
    assert doctor_json(capsys, "--config", str(cfg))["data"]["multi30k"] == "missing: val.en"


def test_native_bf16_resolves_to_bf16(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(hw, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(hw, "_probe", lambda name: name == "_is_amx_tile_supported")
    monkeypatch.chdir(tmp_path)
    info = doctor_json(capsys)
    assert info["precision"]["auto"]["cpu"]["precision"] == "bf16"
    assert "AMX" in info["precision"]["auto"]["cpu"]["reason"]
