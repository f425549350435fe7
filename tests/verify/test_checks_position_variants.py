"""Stage `position_variants`: each check FAILs on a deliberately broken variant, names the configured
variant, and `tmin verify --config X` with model.positional = "rope" / "relative" passes every stage."""

from __future__ import annotations

import pytest

from tests.verify.helpers import run
from transformer_min.cli.main import main
from transformer_min.core.config import Config, ModelConfig
from transformer_min.model import relative, rotary
from transformer_min.verify.registry import Context


def test_rope_check_fails_when_the_angle_is_not_linear_in_the_position(monkeypatch):
    """Angles quadratic in the position still rotate (norms kept) but the scores stop depending on m - n only."""
    angles = rotary.rotary_angles
    monkeypatch.setattr(rotary, "rotary_angles", lambda offset, length, d_k, device=None: angles(
        offset, length, d_k, device) ** 2)
    out = run("position_variants.rope_relative_offset")
    assert not out.passed and "score change under a shift" in out.result.measured


def test_shaw_checks_fail_on_a_flipped_offset_and_on_no_clipping(monkeypatch):
    buckets = relative.relative_buckets
    monkeypatch.setattr(relative, "relative_buckets", lambda q_len, k_len, clip, offset=0, device=None:
                        2 * clip - buckets(q_len, k_len, clip, offset, device))  # clip(i - j) + k: the wrong sign
    assert not run("position_variants.shaw_equals_eq_3_4").passed
    assert run("position_variants.shaw_clipping").passed  # the sign alone keeps the clipping
    monkeypatch.setattr(relative, "relative_buckets", lambda q_len, k_len, clip, offset=0, device=None:
                        buckets(q_len, k_len, 10 * clip, offset, device).clamp(max=2 * clip))  # never clips below
    assert not run("position_variants.shaw_clipping").passed
    assert not run("position_variants.shaw_equals_eq_3_4").passed


@pytest.mark.parametrize("positional", ["rope", "relative"])
def test_cached_decoding_check_fails_when_the_cache_offset_is_lost(positional, monkeypatch):
    """A position-aware attention that puts every cached step at position 0 decodes differently with the cache."""
    ctx = Context(Config(model=ModelConfig(positional=positional)))
    assert run("position_variants.configured_cached_decoding", ctx).passed
    cls = rotary.RotaryAttention if positional == "rope" else relative.RelativeAttention
    encode, attend = cls.encode_positions, cls.attend
    monkeypatch.setattr(cls, "encode_positions", lambda self, q, k, offset: encode(self, q, k, 0))
    monkeypatch.setattr(cls, "attend", lambda self, q, k, v, mask, need_weights, offset: attend(
        self, q, k, v, mask, need_weights, 0))
    assert not run("position_variants.configured_cached_decoding", ctx).passed


def test_the_check_names_the_configured_variant():
    out = run("position_variants.configured_cached_decoding",
              Context(Config(model=ModelConfig(positional="relative", relative_clip=5))))
    assert out.passed
    assert out.result.lines == ["positional: relative (Shaw et al. (2018); NoPositionalEncoding + RelativeAttention, "
                                "relative_clip = 5)"]


@pytest.mark.usefixtures("restore_logging", "clean_tmin_env")
@pytest.mark.parametrize("positional", ["rope", "relative"])
def test_tmin_verify_passes_every_stage_for_the_variant(positional, tmp_path, capsys, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text(f'[model]\npositional = "{positional}"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["verify", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  positional: {positional} (" in out
    assert "== position_variants: Positions in attention: rotary and relative (section 3.5) ==" in out
    assert "0 failed" in out.splitlines()[-1] and "[FAIL]" not in out
