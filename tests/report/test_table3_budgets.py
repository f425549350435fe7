"""Table 3 at longer budgets (issue 35): the per-budget verdicts on made-up results, the claims followed over
the budgets, the records' checks and the report's blocks in English and Chinese."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_min.core.errors import DataError
from transformer_min.core.i18n import set_language
from transformer_min.report import table3_budgets as tb
from transformer_min.report import table3_measured as tm
from transformer_min.report import table3_retrained
from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure, Table, Text

DROP0 = "D P_drop=0.0"  # the paper: 5.77 PPL, 24.6 BLEU against the base's 4.92 and 25.8 (worse without dropout)


def point(row: str, seed: int, budget: int, bleu: float, ppl: float) -> dict:
    return {"row": row, "seed": seed, "id": f"{row}_s{seed}", "budget": budget, "updates": budget,
            "tokens_per_update": 1100.0, "batch_tokens": 1200, "device": "cpu", "val_ppl": ppl, "val_bleu": bleu,
            "test_bleu": bleu + 0.5, "params": 7_000_000, "val_nll": 2.0, "train_nll": 1.5,
            "seconds_per_update": 1.2}


# Made up so that the verdict changes with the budget, each written out by hand from the rule:
#   1,000 updates: base BLEU 30, 31 (spread 1); P_drop 0: 33, 33.5 -> +2.75 beyond noise 1, the paper's Δ is
#                  -1.2: "opposite". PPL: base 9.0, 9.2; P_drop 0: 8.0, 8.1 -> -1.05 beyond 0.2, paper +0.85: opposite.
#   2,000 updates: base 34, 34.5; P_drop 0: 34.2, 34.0 -> -0.15 within noise 0.5: "within noise".
#                  PPL: base 7.0, 7.1; P_drop 0: 7.05, 7.0 -> -0.025 within 0.1: within noise.
#   3,000 updates: base 35, 35.4; P_drop 0: 33, 33.2 -> -2.1 beyond noise 0.4, the paper's direction: "agrees".
#                  PPL: base 6.5, 6.6; P_drop 0: 7.5, 7.4 -> +0.9 beyond 0.1, paper +0.85: agrees.
MADE_UP = [
    point("base", 1, 1000, 30.0, 9.0), point("base", 2, 1000, 31.0, 9.2),
    point(DROP0, 1, 1000, 33.0, 8.0), point(DROP0, 2, 1000, 33.5, 8.1),
    point("base", 1, 2000, 34.0, 7.0), point("base", 2, 2000, 34.5, 7.1),
    point(DROP0, 1, 2000, 34.2, 7.05), point(DROP0, 2, 2000, 34.0, 7.0),
    point("base", 1, 3000, 35.0, 6.5), point("base", 2, 3000, 35.4, 6.6),
    point(DROP0, 1, 3000, 33.0, 7.5), point(DROP0, 2, 3000, 33.2, 7.4),
]


def test_each_budget_is_judged_by_the_rule_on_its_own_points():
    by = tb.judged_by_budget(MADE_UP)
    assert sorted(by) == [1000, 2000, 3000] == tb.budgets_of(MADE_UP)
    bleu = {b: next(j for j in js if j.metric == "val_bleu") for b, js in by.items()}
    assert {b: j.verdict for b, j in bleu.items()} == {1000: tm.OPPOSITE, 2000: tm.WITHIN, 3000: tm.AGREES}
    assert bleu[1000].ours_delta == pytest.approx(33.25 - 30.5) and bleu[1000].noise == pytest.approx(1.0)
    assert bleu[2000].ours_delta == pytest.approx(34.1 - 34.25) and bleu[2000].noise == pytest.approx(0.5)
    assert bleu[3000].ours_delta == pytest.approx(33.1 - 35.2) and bleu[3000].noise == pytest.approx(0.4)
    assert bleu[3000].paper_delta == pytest.approx(24.6 - 25.8)
    ppl = {b: next(j for j in js if j.metric == "val_ppl").verdict for b, js in by.items()}
    assert ppl == {1000: tm.OPPOSITE, 2000: tm.WITHIN, 3000: tm.AGREES}


def test_a_claim_holds_at_the_largest_budget_and_names_where_its_verdict_changed():
    claims = {c.metric: c for c in tb.claims(MADE_UP)}
    c = claims["val_bleu"]
    assert c.row == DROP0 and [b for b, _ in c.steps] == [1000, 2000, 3000]
    assert c.holds and c.last[0] == 3000
    assert c.changed_at == (3000, tm.WITHIN)  # the last change: within noise at 2,000, agrees from 3,000
    set_language("en")
    assert tb.claim_line(c) == "D P_drop=0.0 val BLEU: agrees at 3,000 updates (within noise before 3,000)"
    # Without the 3,000 points the largest budget is 2,000, where the paper's conclusion does not hold.
    shorter = {c.metric: c for c in tb.claims([p for p in MADE_UP if p["budget"] < 3000])}["val_bleu"]
    assert not shorter.holds and shorter.changed_at == (2000, tm.OPPOSITE)
    steady = tb.claims([p for p in MADE_UP if p["budget"] == 3000])
    assert all(s.changed_at is None for s in steady)


def test_a_budget_without_two_seeds_on_both_sides_has_no_noise():
    one_seed = [p for p in MADE_UP if not (p["row"] == DROP0 and p["seed"] == 2 and p["budget"] == 3000)]
    last = {c.metric: c for c in tb.claims(one_seed)}["val_bleu"].last[1]
    assert last.verdict == tm.UNKNOWN and last.noise is None and not last.holds


def test_the_table_has_a_line_per_row_and_budget_with_the_verdicts():
    set_language("en")
    rows = tb.table_rows(MADE_UP)
    assert [(r[0], r[2]) for r in rows] == [("base", "1,000"), ("base", "2,000"), ("base", "3,000"),
                                          (DROP0, "1,000"), (DROP0, "2,000"), (DROP0, "3,000")]
    assert all(len(r) == len(tb.HEADERS) for r in rows)
    last = rows[-1]
    assert last[3] == "1,2" and last[5] == "33.10" and last[10] == "-1.20 / -2.10 (0.40)"
    assert (last[11], last[12]) == (tm.AGREES, tm.AGREES)
    assert rows[0][9:13] == ["", "", "", ""]  # the base has no change from itself


def _write(folder: Path, points: list[dict]) -> Path:
    (folder / tm.BUDGETS_DIR).mkdir(parents=True)
    for p in points:
        (folder / tm.BUDGETS_DIR / f"{p['id']}_u{p['budget']}.json").write_text(json.dumps(p))
    return folder


def test_budget_records_are_read_and_checked(tmp_path):
    assert tm.load_budgets(tmp_path / "none") == []  # a sweep without longer budgets
    got = tm.load_budgets(_write(tmp_path / "ok", MADE_UP))
    assert sorted((p["row"], p["seed"], p["budget"]) for p in got) == sorted(
        (p["row"], p["seed"], p["budget"]) for p in MADE_UP)
    with pytest.raises(DataError, match="budget 5 but 1000 updates"):
        tm.load_budgets(_write(tmp_path / "mismatch", [{**MADE_UP[0], "budget": 5}]))
    with pytest.raises(DataError, match="val_bleu of the wrong type"):
        tm.load_budgets(_write(tmp_path / "type", [{**MADE_UP[0], "val_bleu": "31"}]))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_report_shows_the_budgets_and_judges_the_row_at_the_largest(tmp_path, lang):
    one_x = [{k: v for k, v in p.items() if k != "budget"} for p in MADE_UP if p["budget"] == 1000]
    set_language(lang)
    try:
        blocks = table3_retrained.section(Artifacts(), tm.Sweep(one_x, None, MADE_UP))
        claims = next(b for b in blocks if isinstance(b, Table) and len(b.headers) == 4)
        drop = [r for r in claims.rows if r[0].startswith(DROP0)]
        assert len(drop) == 2 and all(r[3] == table3_retrained.tr("PASS") for r in drop)
        assert all("3,000" in r[1] and "3,000" in r[2] for r in drop)
        budget_table = next(b for b in blocks if isinstance(b, Table) and b.headers == tb.HEADERS)
        assert len(budget_table.rows) == 6
        assert any(isinstance(b, Figure) and b.name == "table3_budgets_delta_bleu" for b in blocks)
        lines = [b.text for b in blocks if isinstance(b, Text) and DROP0 in b.text]
        assert len(lines) == 2
        if lang == "zh":
            assert all("更新" in line for line in lines)
    finally:
        set_language("en")


def test_points_of_two_kinds_of_cpu_are_flagged():
    avx2 = {"cpu_capability": ["AVX2"], "precision": ["fp32"]}
    avx512 = {"cpu_capability": ["AVX512 AVX512_BF16"], "precision": ["fp32"]}
    same = [{**p, "machine": avx2} for p in MADE_UP]
    mixed = [{**p, "machine": avx512 if p["seed"] == 2 else avx2} for p in MADE_UP]
    assert tb.cpu_classes(same) == ["AVX2 fp32"]
    assert tb.cpu_classes(mixed) == ["AVX2 fp32", "AVX512 AVX512_BF16 fp32"]
    set_language("en")
    one_x = [{k: v for k, v in p.items() if k != "budget"} for p in MADE_UP if p["budget"] == 1000]
    warned = [b.text for b in table3_retrained.section(Artifacts(), tm.Sweep(one_x, None, mixed))
              if isinstance(b, Text) and b.text.startswith("Warning: these points")]
    assert len(warned) == 1 and "AVX2 fp32; AVX512 AVX512_BF16 fp32" in warned[0]
    assert not [b for b in table3_retrained.section(Artifacts(), tm.Sweep(one_x, None, same))
                if isinstance(b, Text) and b.text.startswith("Warning: these points")]
