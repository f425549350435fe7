"""tmin explore --lang zh (issue 38): every word of the page comes from the catalog, so the Chinese page (served or
--static) has no English sentence, its <html lang> starts with "zh", and its error replies are Chinese. The
English-prose detector is tests/cli/english_prose.py; the same checks on the English page must find English."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from tests.cli.english_prose import html_visible_text, prose_lines
from transformer_min.cli.main import main
from transformer_min.core.i18n import parse_po, po_text, set_language
from transformer_min.viz.explore.page import ASSETS, asset
from transformer_min.viz.explore.text import page_text

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

SMALL_TOML = """
[model]
d_model = 32
num_heads = 4
d_ff = 64
num_layers = 2
max_len = 64
[attention]
d_model = 64
num_heads = 4
seq_len = 6
"""
EVALS = {"eval_val_bleu", "eval_accuracy", "eval_val_nll"}  # T(name) of curves' evaluation series


def static_page(tmp_path, lang: str) -> str:
    (tmp_path / "small.toml").write_text(SMALL_TOML, encoding="utf-8")
    out = tmp_path / f"explore-{lang}.html"
    assert main(["--config", str(tmp_path / "small.toml"), "explore", "--lang", lang, "--static", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def page_data(html: str) -> dict:
    data = re.search(r'<script id="explore-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    return json.loads(data)


def shown_strings(data: dict) -> list[str]:
    """What the scripts show from the page data: its words, the notes and how each sentence was decoded."""
    return [*data["text"].values(), data["curves"].get("note", ""), *(t["decoded_by"] for t in data["translations"])]


def test_every_text_name_the_page_uses_exists_and_every_name_is_used():
    template = asset("explore.html")
    scripts = "\n".join(asset(n) for n in ASSETS[1:])
    used = set(re.findall(r"\{\{t\.(\w+)\}\}", template)) | set(re.findall(r'\bT\("(\w+)"', scripts))
    used |= set(re.findall(r'"(placeholder_\w+)"', scripts))  # T(cond ? "placeholder_ids" : "placeholder_text")
    names = set(page_text())
    assert used - names == set()
    assert names - used == EVALS
    assert re.findall(r"\{\{(\w+)\}\}", template) == ["lang", "css", "data", "js"]


def test_every_page_text_is_translated_with_the_same_fields():
    catalog = parse_po(po_text("zh"))
    set_language("en")
    english = page_text()
    set_language("zh")
    chinese = page_text()
    for name, text in english.items():
        assert catalog.get(text), f"tmin.po lacks {text!r}"
        assert chinese[name] == catalog[text] != text
        assert set(re.findall(r"\{(\w+)\}", chinese[name])) == set(re.findall(r"\{(\w+)\}", text)), name


def test_static_page_in_chinese_has_no_english_sentence(tmp_path):
    html = static_page(tmp_path, "zh")
    assert re.search(r'<html lang="zh', html)
    visible = html_visible_text(html)
    assert "注意力" in visible and prose_lines(visible) == []
    data = page_data(html)
    assert prose_lines("\n".join(shown_strings(data))) == []
    assert data["translations"][0]["decoded_by"] == "教师强制：输入反转的源句（随机权重）"


def test_the_same_checks_find_english_in_the_english_page(tmp_path):
    """The detector and the extraction can fail: on the English page they find English sentences."""
    html = static_page(tmp_path, "en")
    assert '<html lang="en">' in html
    assert len(prose_lines(html_visible_text(html))) >= 5
    assert len(prose_lines("\n".join(shown_strings(page_data(html))))) >= 10


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8")


@pytest.mark.parametrize("path,field", [
    ("api/translate?sentence=", "句子"),                  # empty sentence
    ("api/translate?sentence=3+x+5", "'x'"),              # not a token id
    ("api/equation?source=demo&heads=3", "heads"),        # a toggle out of its choices
    ("api/equation?source=model&kind=cross&causal=1&sentence=3+4", "causal"),
    ("api/nothing", "/api/nothing"),                      # no such route
])
def test_served_page_and_its_error_replies_are_chinese(serve, random_session, path, field):
    set_language("zh")
    url = serve(random_session)
    status, page = get(url)
    assert status == 200 and '<html lang="zh-CN">' in page and prose_lines(html_visible_text(page)) == []
    status, body = get(url + path)
    error = json.loads(body)["error"]
    assert status in (400, 404) and field in error and re.search(r"[\u4e00-\u9fff]", error), error
    assert prose_lines(error) == [], error
