"""The config reference and the README stay in step with the code."""

import dataclasses
from pathlib import Path

import pytest

from transformer_min import config

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [config.ModelConfig, config.VocabConfig, config.VerifyConfig, config.AttentionDemoConfig,
            config.TrainConfig, config.DataConfig, config.DecodeConfig, config.RuntimeSettings]


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_config_key_is_documented(cls):
    doc = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in doc]
    assert not missing, f"docs/config.md lacks {cls.__name__} keys {missing}"


def test_readme_names_the_ci_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "make test" in readme and "make demo" in readme


def test_settings_example_has_only_placeholders():
    import json

    example = json.loads((ROOT / "settings.example.json").read_text(encoding="utf-8"))
    assert example["api_key"] == "YOUR_TAOTOKEN_API_KEY"
    assert example["api_base"] == "https://taotoken.net/api"
