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

    from transformer_min.cli import build_parser
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
