"""The config reference and the README stay in step with the code."""

import dataclasses
from pathlib import Path

import pytest

from transformer_min.core import config

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
    """Every `## ...` section of docs/results.md that names Multi30k, joined."""
    import re

    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    sections = re.split(r"(?m)^(?=## )", text)
    return "\n".join(sec for sec in sections if sec.startswith("## ") and "Multi30k" in sec.splitlines()[0])


def test_every_multi30k_bleu_table_row_states_its_update_count():
    """Issue 12: minutes buy different updates on each machine, so every BLEU row says how many."""
    import re

    rows = 0
    for table in re.findall(r"(?:^\|.*\|\n)+", _multi30k_section(), flags=re.M):
        lines = table.strip().splitlines()
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        if not any("BLEU" in c or c in ("last", "best (val)") for c in header) or header[0] == "updates":
            if header[0] == "updates":  # a validation curve: its first column is the update count
                rows += len(lines) - 2
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


ZH_DOCS = [ROOT / "README.zh-CN.md", ROOT / "docs" / "zh" / "posts.md"]


def test_chinese_readme_has_the_two_commands_and_links_that_resolve():
    import re

    text = ZH_DOCS[0].read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / link).exists(), link


def test_posts_page_maps_every_post_with_its_labels():
    text = ZH_DOCS[1].read_text(encoding="utf-8")
    for title in ("用 TaoToken 统一 Key 跑通多头注意力最小验证", "从论文公式到能跑的代码中间差了什么",
                  "从论文到可运行代码为什么需要统一 Key 通道", "Transformer 自注意力机制到底怎么落地"):
        assert title in text
    for label in ("输入形状", "注意力权重形状", "每行权重和"):
        assert label in text


@pytest.mark.parametrize("path", ZH_DOCS, ids=lambda p: p.name)
def test_every_tmin_command_in_the_chinese_docs_parses(path):
    """Each `tmin ...` command quoted in the Chinese docs is accepted by the parser, with known stage names."""
    import re
    import shlex

    from transformer_min.cli.main import build_parser
    from transformer_min.verify.registry import STAGES, load_all

    load_all()
    parser = build_parser()
    commands = re.findall(r"`(tmin [^`]+)`", path.read_text(encoding="utf-8"))
    commands += [line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines()
                 if line.startswith("tmin ")]
    assert len(commands) >= 5
    for command in commands:
        argv = shlex.split(command)[1:]
        args = parser.parse_args(argv)  # SystemExit (a failure here) on an unknown option
        for stage in getattr(args, "stages", None) or []:
            assert stage in STAGES, (command, stage)
