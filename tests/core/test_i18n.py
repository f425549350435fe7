"""i18n.py: the zh catalog (stdlib gettext), its msgfmt step, and where the language comes from."""

from __future__ import annotations

import ast
import gettext
import io
import shutil
import string
import subprocess
from pathlib import Path

import pytest

from transformer_min.core import i18n
from transformer_min.core.errors import ConfigError

SRC = Path(i18n.__file__).resolve().parents[1]  # the package root


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def _tr_literals() -> set[str]:
    """Every tr("...") literal in the package source, read with ast (not with our parser)."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tr"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
    return found


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU msgfmt not installed")
def test_compiled_catalog_equals_gnu_msgfmt(tmp_path):
    """Our msgfmt step and GNU msgfmt give catalogs that translate every message the same way."""
    po = SRC / "core" / "locale" / "zh" / "LC_MESSAGES" / "tmin.po"
    mo = tmp_path / "tmin.mo"
    subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
    theirs = gettext.GNUTranslations(io.BytesIO(mo.read_bytes()))
    ours = gettext.GNUTranslations(io.BytesIO(i18n.compile_po(po.read_text(encoding="utf-8"))))
    ids = [k for k in i18n.parse_po(po.read_text(encoding="utf-8")) if k]
    assert len(ids) > 50
    for msgid in ids:
        assert ours.gettext(msgid) == theirs.gettext(msgid) != msgid
    assert ours.info().get("content-type") == "text/plain; charset=UTF-8"


def test_every_tr_message_has_a_chinese_translation_with_the_same_fields():
    catalog = i18n.parse_po(i18n.po_text("zh"))
    used = _tr_literals()
    assert len(used) > 40
    missing = sorted(m for m in used if not catalog.get(m))
    assert not missing, f"tmin.po lacks translations for {missing}"
    for msgid, msgstr in catalog.items():
        if msgid:
            assert _fields(msgstr) == _fields(msgid), msgid  # a lost {shape} would print nothing or raise


def test_stage_titles_and_core_claims_are_translated():
    from transformer_min.verify.registry import STAGES, load_all

    catalog = i18n.parse_po(i18n.po_text("zh"))
    assert all(catalog.get(title) for title, _ in STAGES.values())
    core = [c for c in load_all() if c.stage in ("attention", "multihead", "positional", "encoder", "decoder",
                                                 "full", "scaling")]
    assert all(catalog.get(c.claim) for c in core)


def test_claim_keeps_the_english_quote():
    i18n.set_language("zh")
    text = i18n.claim("softmax over the key axis: every weight row sums to 1")
    assert text.endswith('("softmax over the key axis: every weight row sums to 1")')
    assert "每行权重和" in text
    assert i18n.tr("PASS") == "通过"
    i18n.set_language("en")
    assert i18n.tr("PASS") == "PASS"


@pytest.mark.parametrize("flag,setting,env,want", [
    ("zh", "en", {"LANG": "en_US.UTF-8"}, "zh"),       # --lang first
    (None, "zh", {"LANG": "en_US.UTF-8"}, "zh"),       # then settings.json "language"
    (None, None, {"LANG": "zh_CN.UTF-8"}, "zh"),       # then the locale
    (None, None, {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"),  # LC_ALL wins over LANG
    (None, None, {"LC_ALL": "zh_TW.UTF-8"}, "zh"),
    (None, None, {}, "en"),
    ("EN", "zh", {}, "en"),
    ("zh-CN", None, {}, "zh"),
])
def test_language_precedence(flag, setting, env, want):
    assert i18n.resolve_language(flag, setting, env) == want


def test_unknown_language_names_the_option_and_the_fix():
    with pytest.raises(ConfigError, match=r"--lang: language 'fr' is not one of en, zh; fix: --lang zh"):
        i18n.resolve_language("fr", None, {})


def test_catalog_source_is_package_data():
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    pyproject = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["transformer_min"]
    assert any(Path("core/locale/zh/LC_MESSAGES/tmin.po").match(p) for p in patterns)


def test_settings_json_language_is_read_and_checked(tmp_path):
    from transformer_min.channel.schema import SECTIONS
    from transformer_min.core.project import load_project

    path = tmp_path / "settings.json"
    path.write_text('{"language": "zh", "api_base": "https://taotoken.net/api"}', encoding="utf-8")
    assert load_project(None, path, {}, quiet=True, sections=SECTIONS).runtime.language == "zh"
    path.write_text('{"language": "fr"}', encoding="utf-8")
    with pytest.raises(ConfigError, match="settings.language.*'fr'"):
        load_project(None, path, {}, quiet=True, sections=SECTIONS)


@pytest.mark.parametrize("tag", ["english", "zhx", ""])
def test_only_en_and_zh_tags(tag):
    from transformer_min.core.config import RuntimeSettings

    with pytest.raises(ConfigError):
        i18n.check_language(tag, "--lang")
    if tag:
        with pytest.raises(ConfigError, match="settings.language"):
            RuntimeSettings(language=tag)


@pytest.mark.usefixtures("restore_logging")  # cli.main reconfigures the root logger
def test_every_stage_prints_no_english_labels_under_lang_zh(repo_root, monkeypatch, capsys):
    """`tmin verify --lang zh` (every stage, as `make demo` and the Chinese README run it): apart from the claims'
    quoted English and the formulas, no printed label is left in English (it was for the PE test points' 'paper:',
    the scaling stage, post 003's scaled / unscaled softmax experiment, and the lines of the other stages)."""
    import re

    from transformer_min.cli.main import main

    monkeypatch.chdir(repo_root)
    monkeypatch.delenv("TMIN_CONFIG", raising=False)
    assert main(["verify", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    labels = [line for line in out.splitlines() if line.strip() and not line.startswith("[")]  # not verdicts
    english = re.compile(r"\b(paper|samples|unscaled|scaled|sentence|weights|output|input|row sums|decimals|head|"
                         r"target|passed|failed|mean|variance|grad|shape|ours|prints|score|within|exactly|peak|"
                         r"cheaper|whole|formula|days|outputs|may attend|computed)\b")  # PAPER.md, config.toml stay
    assert not [line for line in labels if english.search(line)]
    assert "不缩放" in out and "缩放后" in out and "论文（PAPER.md）" in out
    from tests.cli.english_prose import prose_lines

    assert not prose_lines(out), prose_lines(out)  # issue 38: the last one was `positional: sinusoidal (section 3.5`
    assert "  位置编码：sinusoidal（论文 3.5 节；SinusoidalPositionalEncoding + MultiHeadAttention）\n" in out


@pytest.mark.usefixtures("restore_logging")  # cli.main reconfigures the root logger
def test_report_in_chinese_has_chinese_title_verdicts_and_headers(tmp_path, capsys, monkeypatch):
    """`tmin report --lang zh`: the title, the verdict line, the contents, the section titles, the claims table's
    headers and each row's verdict are Chinese (they were English around the translated stage headings); the HTML
    still colours the verdict cells by their PASS / FAIL class, and claims.csv keeps PASS for scripts."""
    from transformer_min.cli.main import main

    monkeypatch.delenv("TMIN_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # the built-in paper defaults, no settings.json of the checkout
    assert main(["report", "--quick", "--stage", "attention", "--lang", "zh", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert md.startswith("# 《Attention Is All You Need》逐条论断核对\n\n**6/6 条论断通过**\n\n"
                         "## 目录\n")
    assert "\n## 概要\n" in md and "\n## 论断\n" in md and "| 类别 | 通过 | 失败 |" in md
    assert "| 论文章节 | 论断 | 代码 | 实测 | 期望 | 类别 | 结论 | 检查 |" in md
    assert " | **通过** | attention.weights_rows_sum_to_one |" in md and "claims PASS" not in md
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert html.count('<td class="PASS">通过</td>') == 6 and "<h2>目录</h2>" in html and '<html lang="zh-CN">' in html
    assert ",PASS," in (tmp_path / "data" / "claims.csv").read_text(encoding="utf-8")


@pytest.mark.parametrize("how", ["flag", "locale"])
@pytest.mark.usefixtures("restore_logging")  # cli.main reconfigures the root logger
def test_the_notes_on_the_posts_key_names_follow_the_language(tmp_path, capsys, monkeypatch, how):
    """The first lines a reader of the posts sees are notes on their key names (n_heads, settings.json base_url)
    and on d_k kept as written: under --lang zh or a zh_CN locale they are Chinese too, settings.json's included
    (it is read before the subcommand runs)."""
    from transformer_min.core import schema
    from transformer_min.cli.main import main

    monkeypatch.setattr(schema, "_NOTES_SHOWN", set())
    for name in ("TMIN_CONFIG", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text("[attention]\nd_model = 64\nn_heads = 2\nd_k = 16\nseq_len = 4\n",
                                          encoding="utf-8")
    (tmp_path / "settings.json").write_text('{"base_url": "https://taotoken.net/api"}', encoding="utf-8")
    if how == "locale":
        monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert main(["verify", "attention"] + (["--lang", "zh"] if how == "flag" else [])) == 0
    err = capsys.readouterr().err
    assert "提示：config.toml：[attention] 的 n_heads 按 num_heads 读取" in err
    assert "提示：settings.json：'base_url' 按 'api_base' 读取" in err
    assert "[attention] num_heads * d_k = 2 * 16 = 32 != d_model 64：不是论文的 d_model / h" in err
    assert "note:" not in err and "read as" not in err
