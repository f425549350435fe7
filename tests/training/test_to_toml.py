"""The run's config.toml is written by tomli_w (issue 36) and reads back as the config it was written from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transformer_min.core.config import Config, config_from_dict, config_to_dict
from transformer_min.core.project import load_project
from transformer_min.training.run_dir import to_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_round_trips(path):
    cfg = load_project(str(path), quiet=True).config
    text = to_toml(config_to_dict(cfg))
    assert config_from_dict(tomllib.loads(text), source=cfg.source) == cfg


def test_strings_none_and_numbers_round_trip():
    """Quotes, backslashes and a newline in a string (the hand-written writer emitted a raw newline: invalid
    TOML), a None value (left out: the default applies), small and large floats."""
    data = {"train": {"name": 'run "a"\\b\nc', "out_dir": "runs", "time_budget_minutes": None, "lr_factor": 1e-9},
            "model": {"dropout": 0.1, "layer_norm_eps": 1e-05, "max_len": 10 ** 6}}
    back = tomllib.loads(to_toml(data))
    assert back == {"train": {"name": 'run "a"\\b\nc', "out_dir": "runs", "lr_factor": 1e-9},
                    "model": {"dropout": 0.1, "layer_norm_eps": 1e-05, "max_len": 10 ** 6}}


def test_scalar_lines_read_as_before():
    """Sections and `key = value` lines, as the files written before tomli_w (people grep them)."""
    text = to_toml(config_to_dict(Config()))
    assert text.startswith("[model]\nd_model = 512\n") and "\n[train]\n" in text and 'norm = "post"\n' in text
