"""`--set section.key=value` (issue 14): a common option of every command, applied over config.toml and the
environment, validated like the file, before or after the subcommand."""

from __future__ import annotations

import json
import re

import pytest

from transformer_min.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")


@pytest.fixture
def at_repo_root(monkeypatch, repo_root):
    monkeypatch.chdir(repo_root)
    return repo_root


def test_verify_attention_with_four_heads(at_repo_root, capsys):
    """The shipped [attention] has h = 8 over d_model 512; --set makes it 4 heads of 512 / 4 = 128 (section 3.2.2)."""
    assert main(["verify", "attention", "--set", "attention.num_heads=4"]) == 0
    out = capsys.readouterr().out
    demo = next(line for line in out.splitlines() if "[attention] demo:" in line)
    assert "h 4," in demo and "d_k 128" in demo and "d_v 128" in demo
    assert "weights (batch, h, seq_len, seq_len) = (2, 4, 6, 6)" in out
    assert main(["verify", "attention"]) == 0  # without it: the file's 8 heads
    assert "weights (batch, h, seq_len, seq_len) = (2, 8, 6, 6)" in capsys.readouterr().out


def test_set_before_and_after_the_subcommand_both_apply(at_repo_root, capsys):
    argv = ["--set", "attention.d_model=64", "verify", "attention", "--set", "attention.num_heads=2"]
    assert main(argv) == 0
    demo = next(line for line in capsys.readouterr().out.splitlines() if "[attention] demo:" in line)
    assert "d_model 64, h 2, d_k 32" in demo  # 64 / 2


# Every command that loads a config reads it through the one loader, so a misspelt --set stops each of them
# with the same message, before any work (no checkpoint, data or network is needed to get there).
COMMANDS = [
    ["verify", "--list"], ["report", "--quick"], ["train", "--task", "copy"], ["data", "prepare"],
    ["eval", "--checkpoint", "nowhere"], ["translate", "--checkpoint", "nowhere", "ein hund"],
    ["decode", "--checkpoint", "nowhere", "3 4"], ["average", "nowhere"], ["channel", "check"],
    ["channel", "models"], ["ask", "why?"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_every_command_validates_set(at_repo_root, capsys, argv):
    assert main([*argv, "--set", "model.num_head=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model.num_head: unknown key (--set model.num_head=4); did you mean 'num_heads'?")
    assert err.count("\n") == 1


def test_doctor_shows_the_set_and_reports_a_bad_one(at_repo_root, capsys):
    assert main(["doctor", "--json", "--probe-seconds", "0", "--set", "train.precision=fp32"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["precision"]["config"]["train.precision"] == "fp32"
    assert main(["doctor", "--json", "--probe-seconds", "0", "--set", "train.precison=fp32"]) == 0  # it reports
    info = json.loads(capsys.readouterr().out)
    assert any("train.precison: unknown key" in w and "did you mean 'precision'" in w for w in info["warnings"])


def test_set_beats_the_environment_and_a_flag_beats_set(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMIN_LOG_LEVEL", "DEBUG")
    assert main(["verify", "--list", "--set", "settings.log_level=ERROR"]) == 0
    import logging

    assert logging.getLogger().level == logging.ERROR  # --set over TMIN_LOG_LEVEL
    assert main(["--log-level", "WARNING", "verify", "--list", "--set", "settings.log_level=ERROR"]) == 0
    assert logging.getLogger().level == logging.WARNING  # the flag over --set


def test_set_on_a_checkpoint_command_is_limited_to_decode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["average", "nowhere", "--set", "decode.beam_size=8"]) == 2
    assert re.search(r"error: --set decode\.\*: tmin average .*reads no config key; fix: drop it",
                     capsys.readouterr().err)
