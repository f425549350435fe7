"""Issue 38, item 5: a message that sends the reader to a doc sends them to one that exists, and a Chinese reader to
the Chinese page where there is one (docs/zh/channel.md, not the English docs/channel.md). Read from the catalog
(every msgid and its msgstr) and the repository's files, not from our code."""

from __future__ import annotations

import re
from pathlib import Path

from transformer_min.core import i18n

ROOT = Path(__file__).resolve().parents[2]
DOC = re.compile(r"\bdocs/[\w./-]+\.md\b")
README_SECTION = re.compile(r"(README(?:\.zh-CN\.md)?)[:：] ?([^)）;；]+)")


def messages() -> list[tuple[str, str]]:
    return [(k, v) for k, v in i18n.parse_po(i18n.po_text("zh")).items() if k]


def headings(readme: str) -> set[str]:
    text = (ROOT / readme).read_text(encoding="utf-8")
    return {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}


def test_every_doc_a_message_names_exists():
    named = {path for msgid, msgstr in messages() for path in DOC.findall(msgid + " " + msgstr)}
    assert "docs/zh/channel.md" in named
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing, missing


def test_chinese_messages_name_the_chinese_page_where_there_is_one():
    wrong = []
    for msgid, msgstr in messages():
        for path in DOC.findall(msgstr):
            zh = path.replace("docs/", "docs/zh/", 1)
            if not path.startswith("docs/zh/") and (ROOT / zh).is_file():
                wrong.append((msgstr[:80], path, zh))
    assert not wrong, wrong


def test_readme_sections_a_message_names_exist():
    pointers = [m.groups() for msgid, msgstr in messages() for m in README_SECTION.finditer(msgid + " " + msgstr)]
    assert pointers
    for readme, section in pointers:
        readme = "README.md" if readme == "README" else readme
        assert section.strip() in headings(readme), (readme, section)


def test_the_chinese_channel_page_is_a_translation_of_the_english_one():
    """Same sections, tables and code blocks as docs/channel.md, and Chinese prose."""
    en = (ROOT / "docs" / "channel.md").read_text(encoding="utf-8")
    zh = (ROOT / "docs" / "zh" / "channel.md").read_text(encoding="utf-8")
    count = lambda text, pattern: len(re.findall(pattern, text, flags=re.M))  # noqa: E731
    for pattern in (r"^##+ ", r"^```", r"^\|---"):
        assert count(zh, pattern) == count(en, pattern), pattern
    assert count(zh, r"^\| ") == count(en, r"^\| ")  # every table row, the troubleshooting table's included
    for command in ("tmin channel check", "tmin channel models", "tmin verify --llm", "TAOTOKEN_API_KEY",
                    "config.local.toml", "Retry-After"):
        assert command in zh
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in zh) > 2000
