"""core/textwidth.py: terminal columns (a CJK character takes two), padding and wrapping by columns."""

from __future__ import annotations

import pytest

from transformer_min.core.textwidth import pad, width, wrap


@pytest.mark.parametrize("text,columns", [("key", 3), ("密钥", 4), ("结果：", 6), ("sk-…abcd", 8), ("ｆｕｌｌ", 8),
                                           ("e\u0301", 1), ("", 0)])
def test_width_counts_wide_characters_twice(text, columns):
    assert width(text) == columns


def test_pad_aligns_by_columns_not_characters():
    assert pad("结果", 10) == "结果      " and pad("result", 10) == "result    " and pad("toolong", 3) == "toolong"


def test_wrap_breaks_between_cjk_characters_and_at_spaces():
    assert wrap("alpha beta gamma", 10) == ["alpha beta", "gamma"]
    assert wrap("一二三四五六", 6) == ["一二三", "四五六"]
    assert wrap("一二，三四", 6) == ["一二，", "三四"]  # a closing comma never starts a line
    assert wrap("verylongword x", 4) == ["verylongword", "x"]  # a long word stays whole
    assert wrap("  a\n  b  ", 10) == ["a b"]
