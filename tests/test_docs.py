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


def _multi30k_section() -> str:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    start = text.index("## Multi30k")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_every_multi30k_bleu_table_row_states_its_update_count():
    """Issue 12: minutes buy different updates on each machine, so every BLEU row says how many."""
    import re

    rows = 0
    for table in re.findall(r"(?:^\|.*\|\n)+", _multi30k_section(), flags=re.M):
        lines = table.strip().splitlines()
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        if not any("BLEU" in c or c in ("last", "best (val)") for c in header):
            continue
        assert "updates" in header, f"a Multi30k BLEU table without an updates column: {lines[0]}"
        col = header.index("updates")
        for line in lines[2:]:
            cell = line.strip("|").split("|")[col].strip()
            assert re.fullmatch(r"\d[\d,]*", cell), f"no update count in: {line}"
            rows += 1
    assert rows >= 5


def test_multi30k_prose_figures_state_their_update_count():
    """Each paragraph or bullet of the Multi30k section that gives a BLEU-sized figure with a minute
    budget also names the updates."""
    import re

    for block in re.split(r"\n\s*\n|\n- ", _multi30k_section()):
        if block.lstrip().startswith("|") or "```" in block:
            continue
        if re.search(r"\b\d\d\.\d\d\b", block) and re.search(r"\b\d+ min(ute)?s?\b", block):
            assert "updates" in block or "steps" in block, f"figures without an update count:\n{block}"
