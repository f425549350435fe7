"""Issue 38, item 2: `--help` in Chinese. Under `--lang zh`, a zh_CN locale or settings.json "language", the help of
`tmin` and of every subcommand (found by walking the parser, so a new one is covered) has no English sentence per
the detector of `tests/cli/english_prose.py`; every text the parsers declare (and argparse's own words) has a
translation in the catalog with the same %-fields; English help stays English."""

from __future__ import annotations

import argparse
import re

import pytest

from transformer_min.cli.main import build_parser, main
from transformer_min.core import i18n

from .english_prose import prose_lines

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

# argparse's own words that a help screen shows (Python 3.10+), found by the catalog at print time
ARGPARSE_WORDS = ["usage: ", "positional arguments", "options", "show this help message and exit",
                  "show program's version number and exit"]


def command_paths() -> list[list[str]]:
    """Every command line that reaches a parser: [], ["verify"], ..., ["channel", "check"]."""
    i18n.set_language("en")
    paths: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        paths.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(build_parser(), [])
    return paths


COMMANDS = command_paths()


def help_texts() -> set[str]:
    """Every description, section title and help string the parsers declare (before any translation)."""
    i18n.set_language("en")
    texts: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        texts.update(t for t in [parser.description, parser.epilog] if t)
        texts.update(g.title for g in parser._action_groups if g.title)
        for action in parser._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                texts.add(action.help)
            if isinstance(action, argparse._SubParsersAction):
                texts.update(a.help for a in action._choices_actions if a.help)
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    return texts


def help_of(path: list[str], extra: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help", *extra])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_the_walk_finds_every_subcommand():
    names = {" ".join(p) for p in COMMANDS}
    assert {"", "verify", "train", "report", "eval", "translate", "channel", "channel check", "channel models",
            "ask", "doctor", "explore", "export", "data", "data prepare", "average", "decode"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "tmin")
def test_help_is_chinese_under_lang_zh(path, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no settings.json of the checkout
    out = help_of(path, ["--lang", "zh"], capsys)
    assert out.startswith("用法： tmin"), out[:80]
    assert not prose_lines(out), prose_lines(out)
    assert "选项：" in out and "options" not in out and "show this help" not in out
    assert not re.search(r"^(positional arguments|common options):$", out, re.M)


@pytest.mark.parametrize("how", ["locale", "settings"])
def test_help_follows_the_locale_and_settings_json(how, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    if how == "locale":
        monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    else:
        (tmp_path / "settings.json").write_text('{"language": "zh"}', encoding="utf-8")
    for path in (["verify"], ["train"]):
        out = help_of(path, [], capsys)
        assert "逐阶段" in out or "训练" in out
        assert not prose_lines(out), prose_lines(out)
    out = help_of(["train"], ["--lang", "en"], capsys)  # --lang wins
    assert out.startswith("usage: tmin train") and "show this help message and exit" in out


def test_english_help_is_unchanged(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = help_of(["verify"], ["--lang", "en"], capsys)
    assert out.startswith("usage: tmin verify [-h]")
    assert "\noptions:\n  -h, --help            show this help message and exit\n" in out
    assert "Run every check of the paper, stage by stage; exit 1 on any FAIL." in out
    assert "\ncommon options:\n" in out


def test_every_help_text_has_a_translation_with_the_same_fields():
    catalog = i18n.parse_po(i18n.po_text("zh"))
    texts = help_texts() | set(ARGPARSE_WORDS)
    assert len(texts) > 80
    missing = sorted(t for t in texts if not catalog.get(t))
    assert not missing, f"tmin.po lacks translations of these help texts: {missing}"
    fields = re.compile(r"%\([a-z_]+\)[sd]|%%")
    for text in texts:  # argparse expands %(default)s in the translated text too
        assert sorted(fields.findall(catalog[text])) == sorted(fields.findall(text)), text
        assert "%" not in fields.sub("", catalog[text]), text


def test_wide_help_lines_fit_the_terminal(capsys, tmp_path, monkeypatch):
    """Chinese lines wrap by columns (a CJK character is two), so no help line is wider than argparse's width."""
    from transformer_min.core.textwidth import width

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    out = help_of(["verify"], ["--lang", "zh"], capsys)
    too_wide = [line for line in out.splitlines() if width(line) > 80 and "{" not in line and "[" not in line]
    assert not too_wide, too_wide
