"""`tmin report --lang zh` (issue 24): the measured sections speak Chinese too, not only the claim rows.

The sections are built through the library (no claims run, so it stays fast) and rendered as report.md; the
English-prose detector is `tests/cli/english_prose.py`. Under English the same sections keep the sentences the
other report tests look for."""

from __future__ import annotations

import pytest

from tests.cli.english_prose import prose_lines
from transformer_min.core.config import Config
from transformer_min.core.i18n import set_language
from transformer_min.report import build, figures, render
from transformer_min.report import table1 as table1_section
from transformer_min.verify.registry import Context


def measured_markdown(lang: str) -> dict[str, str]:
    """{section id: its report.md text} for Table 3's parameter counts, Table 1 and the deviations, in `lang`."""
    set_language(lang)
    art, ctx = figures.Artifacts(), Context(Config())
    sections = [build.table3_block(art, ctx, None),
                render.Section("table1", "Table 1: why self-attention, measured", table1_section.section(art, True)),
                build.deviations_section()]
    return {s.id: render.render_markdown("report", "summary", [s]).split("\n## ", 2)[-1] for s in sections}


@pytest.fixture(scope="module")
def zh_sections() -> dict[str, str]:
    try:
        return measured_markdown("zh")
    finally:
        set_language("en")


@pytest.mark.parametrize("section", ["table3", "table1", "deviations"])
def test_measured_sections_have_no_english_prose_under_zh(zh_sections, section):
    md = zh_sections[section]
    assert md.count("\n") > 5, md  # the section is there, not an empty shell
    assert prose_lines(md) == [], section


def test_table3_and_table1_in_chinese_keep_numbers_and_code(zh_sections):
    t3, t1 = zh_sections["table3"], zh_sections["table1"]
    assert "| 行 | 配置文件 | 我们的参数量，V = 37000 |" in t3 and "| 论文（M） |" in t3
    assert "| base | N 6, d 512, d_ff 2048, h 8, d_k 64, d_v 64 | 63,082,496 | 65,110,016 | 65.11M | 65 |" \
        in t3
    assert "50,356,224" in t3 and "`build_model`" in t3 and "数据：[`data/table3_params.csv`]" in t3
    assert "| 层类型 | 复杂度（论文） | 拟合的 FLOPs（我们的） | n = 512、d = 1024 时的 FLOPs |" in t1
    assert "交叉点。" in t1 and "`torch.utils.flop_counter.FlopCounterMode`" in t1


def test_english_sections_are_unchanged():
    md = measured_markdown("en")
    t3, t1 = md["table3"], md["table1"]
    assert "| row | config | ours, V = 37000 | ours, V = 40960 | ours (M), V = 40960 | paper (M) |" in t3
    assert ("which adds 50,356,224 parameters, yet the paper prints 168M and 213M, 45M apart. Ours: 214,245,376 at "
            "V = 37000, 1.25M from 213M (accepted within 1.5M)") in t3
    assert "Row E (learned positional embeddings) has 524,288 more parameters than base" in t3
    assert " Data: [`data/table3_params.csv`](data/table3_params.csv)." in t3
    assert "| layer | complexity (paper) | fitted FLOPs (ours) | FLOPs at n = 512, d = 1024 |" in t1
    assert "with kernel widths k in [3, 7] and neighbourhoods r in [8, 32];" in t1
    assert "exactly when n < d: holds on every grid point with n != d." in t1
    from transformer_min.report import deviations

    assert deviations.markdown_table().strip() in md["deviations"]
