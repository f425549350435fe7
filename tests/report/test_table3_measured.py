"""Table 3 retrained (issue 26): the rows derived from the base, the verdict rule on made-up results, the
results folder's checks, and the report's blocks in English and Chinese."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_min.core.config import config_to_dict
from transformer_min.core.project import load_project
from transformer_min.core.errors import ConfigError, DataError
from transformer_min.core.i18n import set_language
from transformer_min.report import table3_measured as tm
from transformer_min.report import table3_plan as plan
from transformer_min.report import table3_retrained
from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure, Table
from transformer_min.training.run_dir import to_toml
from transformer_min.verify.checks import table3 as t3

REPO = Path(__file__).resolve().parents[2]

# The mapping for the base d_model 256, h 4, d_k 64, d_ff 1024, N 3 (written out, not computed).
EXPECTED = {
    "base": {},
    "A h=1": {"model.num_heads": 1}, "A h=4": {"model.num_heads": 2}, "A h=16": {"model.num_heads": 8},
    "A h=32": {"model.num_heads": 16},
    "B d_k=16": {"model.d_k": 16, "model.free_head_dims": True},
    "B d_k=32": {"model.d_k": 32, "model.free_head_dims": True},
    "C N=2": {"model.num_layers": 1}, "C N=4": {"model.num_layers": 2}, "C N=8": {"model.num_layers": 4},
    "C d_model=256": {"model.d_model": 128}, "C d_model=1024": {"model.d_model": 512},
    "C d_ff=1024": {"model.d_ff": 512}, "C d_ff=4096": {"model.d_ff": 2048},
    "D P_drop=0.0": {"model.dropout": 0.0}, "D P_drop=0.2": {"model.dropout": 0.2},
    "D eps_ls=0.0": {"train.label_smoothing": 0.0}, "D eps_ls=0.2": {"train.label_smoothing": 0.2},
    "E learned positions": {"model.positional": "learned"},
    "big": {"model.d_model": 512, "model.d_ff": 2048, "model.num_heads": 8, "model.dropout": 0.3},
}
BOOK = {"train.seed": 7, "train.name": "x", "train.steps": 1456, "train.time_budget_minutes": 0.0,
        "train.batch_tokens": 1200, "train.keep_last": 1}


def test_every_paper_row_has_a_variant_with_the_papers_scores():
    assert [v.row for v in plan.VARIANTS] == [r.name for r in t3.ROWS]  # every row of Table 3, in its order
    assert len(plan.VARIANTS) - 1 >= 19
    # PAPER.md, Table 3 (newstest2013): a few cells written out
    assert (plan.variant("base").ppl, plan.variant("base").bleu) == (4.92, 25.8)
    assert (plan.variant("A h=1").ppl, plan.variant("A h=1").bleu) == (5.29, 24.9)
    assert (plan.variant("C N=2").ppl, plan.variant("C N=2").bleu) == (6.11, 23.7)
    assert (plan.variant("D eps_ls=0.0").ppl, plan.variant("D eps_ls=0.2").bleu) == (4.67, 25.7)
    assert (plan.variant("big").ppl, plan.variant("big").bleu) == (4.33, 26.4)
    with pytest.raises(ConfigError, match="no row 'Z'.*A_h1"):
        plan.variant("Z")


def test_each_row_derived_from_the_base_differs_only_in_its_fields(tmp_path):
    """Written as TOML and read back through the loader: the row's fields and the bookkeeping, nothing else."""
    base = load_project(REPO / "configs" / "multi30k_de_en.toml", env={}, quiet=True).config
    for v in plan.VARIANTS:
        path = tmp_path / f"{v.slug}.toml"
        path.write_text(to_toml(config_to_dict(plan.derive(base, v, BOOK))), encoding="utf-8")
        got = plan.differing(base, load_project(path, env={}, quiet=True).config)
        row = {k: b for k, (_, b) in got.items() if k not in BOOK}
        assert row == EXPECTED[v.row], v.row
        assert {k: b for k, (_, b) in got.items() if k in BOOK} == {k: x for k, x in BOOK.items()
                                                                   if x != plan.get(base, k)}
    a_h32 = load_project(tmp_path / "A_h32.toml", env={}, quiet=True).config
    assert a_h32.model.head_dim_k == 16  # d_k = d_model / h, as the paper's 16


def test_a_smaller_base_scales_by_the_same_ratios():
    """d_model 32, h 4 (d_k 8), d_ff 64, N 3: the ratios, not the issue's numbers."""
    from transformer_min.core.config import Config, ModelConfig

    base = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=3))
    assert plan.changes(plan.variant("B_dk16"), base) == {"model.free_head_dims": True, "model.d_k": 2}
    assert plan.changes(plan.variant("A_h1"), base) == {"model.num_heads": 1}
    assert plan.changes(plan.variant("C_d1024"), base) == {"model.d_model": 64}
    with pytest.raises(ConfigError, match="bookkeeping"):
        plan.derive(base, plan.BASE, {"model.d_model": 8})


def _rec(row: str, seed: int, bleu: float, ppl: float, **extra) -> dict:
    return {"row": row, "seed": seed, "updates": 100, "tokens_per_update": 1000.0, "batch_tokens": 1200,
            "device": "cpu", "val_ppl": ppl, "val_bleu": bleu, "test_bleu": bleu + 1, "params": 7_000_000, **extra}


MADE_UP = ([_rec("base", s, b, p) for s, b, p in ((1, 30.0, 8.0), (2, 30.4, 8.1), (3, 30.2, 8.05))]
           # BLEU -2.1 beyond the base's 0.4 spread (paper -0.9): agrees; PPL +0.05 within 0.1: within noise
           + [_rec("A h=1", s, b, p) for s, b, p in ((1, 28.0, 8.1), (2, 28.2, 8.1))]
           # BLEU +1.3 (paper -0.4): opposite; PPL -0.55 (paper +0.09): opposite
           + [_rec("A h=32", s, b, p) for s, b, p in ((1, 31.5, 7.5), (2, 31.5, 7.5))]
           # the paper's "nearly identical" (-0.1 BLEU, 0.00 PPL): within noise holds, a clear change differs
           + [_rec("E learned positions", s, b, p) for s, b, p in ((1, 30.1, 9.0), (2, 30.3, 9.1))]
           + [_rec("C N=2", 1, 20.0, 12.0)])  # one seed: noise unknown


def test_verdicts_follow_the_rule_on_made_up_results():
    got = {(j.row, j.metric): j for j in tm.judge(tm.stats(MADE_UP))}
    j = got[("A h=1", "val_bleu")]
    assert j.verdict == tm.AGREES and j.holds
    assert j.ours_delta == pytest.approx(28.1 - 30.2) and j.noise == pytest.approx(0.4)
    assert j.paper_delta == pytest.approx(24.9 - 25.8)
    assert got[("A h=1", "val_ppl")].verdict == tm.WITHIN and not got[("A h=1", "val_ppl")].holds
    assert got[("A h=32", "val_bleu")].verdict == tm.OPPOSITE and not got[("A h=32", "val_bleu")].holds
    assert got[("A h=32", "val_ppl")].verdict == tm.OPPOSITE
    e_bleu, e_ppl = got[("E learned positions", "val_bleu")], got[("E learned positions", "val_ppl")]
    assert e_bleu.verdict == tm.WITHIN and e_bleu.paper_flat and e_bleu.holds
    assert e_ppl.verdict == tm.DIFFERS and not e_ppl.holds  # +0.98 PPL where the paper shows 4.92 = 4.92
    assert got[("C N=2", "val_bleu")].verdict == tm.UNKNOWN and not got[("C N=2", "val_bleu")].holds
    assert ("base", "val_bleu") not in got


@pytest.mark.parametrize("paper, ours, noise, want", [
    (-0.9, -0.5, 0.4, tm.AGREES), (-0.9, -0.4, 0.4, tm.WITHIN), (-0.9, 0.41, 0.4, tm.OPPOSITE),
    (0.6, 0.7, 0.5, tm.AGREES), (0.05, 0.7, 0.5, tm.DIFFERS), (0.0, -0.2, 0.5, tm.WITHIN), (0.6, 9.0, None, tm.UNKNOWN),
])
def test_verdict_rule(paper, ours, noise, want):
    assert tm.verdict(paper, ours, noise, flat=0.1) == want


def test_table_rows_give_mean_half_spread_and_both_changes():
    rows = {r[0]: r for r in tm.table_rows(MADE_UP)}
    assert list(rows) == ["base", "A h=1", "A h=32", "C N=2", "E learned positions"]  # the paper's order
    h = dict(zip(tm.HEADERS, rows["A h=1"]))
    assert h["val BLEU"] == "28.10 ± 0.10" and h["seeds"] == "2" and h["paper BLEU"] == "24.9"
    assert h["Δ BLEU paper / ours"] == "-0.90 / -2.10" and h["BLEU verdict"] == tm.AGREES
    assert dict(zip(tm.HEADERS, rows["base"]))["BLEU verdict"] == ""
    assert "| A h=1 |" in tm.format_markdown(tm.HEADERS, list(rows.values()))


def test_table_rows_with_the_plan_list_every_row_and_mark_the_unrun_ones():
    from transformer_min.model.transformer import build_model, count_parameters

    base = load_project(REPO / "configs" / "multi30k_de_en.toml", env={}, quiet=True).config
    planned = tm.planned_millions(base)
    # against a model really built from the derived config (not on the meta device)
    n2 = plan.apply(base, plan.changes(plan.variant("C N=2"), base))
    assert planned["C N=2"] == pytest.approx(count_parameters(build_model(n2)) / 1e6)
    assert planned["B d_k=16"] < planned["B d_k=32"] < planned["base"] < planned["C N=8"] < planned["big"]
    rows = {r[0]: dict(zip(tm.HEADERS, r)) for r in tm.table_rows(MADE_UP, planned)}
    assert list(rows) == [v.row for v in plan.VARIANTS]  # every row of the paper's table, in its order
    assert rows["A h=1"]["BLEU verdict"] == tm.AGREES and rows["A h=1"]["seeds"] == "2"  # measured: as before
    h4 = rows["A h=4"]
    assert h4["seeds"] == "0" and h4["val BLEU"] == h4["BLEU verdict"] == "not yet run"
    assert h4["Δ BLEU paper / ours"] == "-0.30 / not yet run" and h4["paper BLEU"] == "25.5"
    assert h4["params (M)"] == f"{planned['A h=4']:.2f}"


def _write(folder: Path, recs: list[dict]) -> Path:
    (folder / "results").mkdir(parents=True)
    for i, r in enumerate(recs):
        (folder / "results" / f"{i}.json").write_text(json.dumps(r), encoding="utf-8")
    return folder


def test_load_results_reads_every_run_and_names_what_is_wrong(tmp_path):
    assert len(tm.load_results(_write(tmp_path / "ok", MADE_UP))) == len(MADE_UP)
    with pytest.raises(DataError, match="no results/ folder.*benchmarks/table3.py"):
        tm.load_results(tmp_path / "nosuch")
    with pytest.raises(DataError, match="no finished run yet"):
        tm.load_results(_write(tmp_path / "empty", []))
    with pytest.raises(DataError, match="lacks val_bleu.*delete it"):
        tm.load_results(_write(tmp_path / "key", [{k: v for k, v in MADE_UP[0].items() if k != "val_bleu"}]))
    with pytest.raises(DataError, match="different budgets"):
        tm.load_results(_write(tmp_path / "mixed", [MADE_UP[0], {**MADE_UP[1], "updates": 50}]))
    bad = _write(tmp_path / "bad", [])
    (bad / "results" / "x.json").write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match="x.json: not a readable result"):
        tm.load_results(bad)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_report_blocks_hold_the_table_the_claims_and_the_figure(lang):
    set_language(lang)
    try:
        art = Artifacts()
        blocks = table3_retrained.section(art, tm.Sweep(MADE_UP))
        tables = [b for b in blocks if isinstance(b, Table)]
        claims = next(t for t in tables if t.status_col is not None)
        status = [r[t.status_col] for t in [claims] for r in t.rows]
        from transformer_min.core.i18n import tr

        assert len(status) == 2 * (len(plan.VARIANTS) - 1)  # every (row, metric) conclusion of the paper's table
        assert status.count(tr("PASS")) == 2  # A h=1 BLEU agrees; E BLEU within noise where the paper is flat
        assert status.count(tr("not reproduced at this scale")) == 6 and tr("FAIL") not in status  # 8 judged
        assert status.count(tr("SKIP")) == len(status) - 8  # no finished run: SKIP, never PASS
        assert any(isinstance(b, Figure) and b.name == "table3_delta_bleu" for b in blocks)
        assert "figures/table3_delta_bleu.png" in art.files and "data/table3_measured.csv" in art.files
        text = " ".join(str(b) for b in blocks)
        assert ("在此规模下未复现" in text) == (lang == "zh")
    finally:
        set_language("en")


def test_the_report_section_renders_the_measured_rows_in_markdown_and_html():
    """build.table3_block with the runs: the exact counts, then the table, the claim rows and the figure."""
    from transformer_min.core.config import Config
    from transformer_min.report import build, render
    from transformer_min.verify.base import Context

    set_language("en")
    art = Artifacts()
    section = build.table3_block(art, Context(Config()), tm.Sweep(MADE_UP))
    md = render.render_markdown("t", "s", [section])
    assert "## Table 3: parameter counts, and retrained at small scale" in md
    assert "| base | N 6, d 512" in md  # the exact parameter counts stay
    assert "| A h=1 | h x1/8, at least 1: the single head (d_k = d_model) | 2 |" in md
    assert "**not reproduced at this scale**" in md and "**PASS**" in md
    assert "2 of 8 Table 3 conclusions hold beyond noise" in md
    assert "30 of the table's 38 conclusions are not judged yet (SKIP)" in md
    assert "| A h=4: val BLEU lower than base (paper 25.5 against 25.8) | not yet run |  | **SKIP** |" in md
    assert "figures/table3_delta_bleu.png" in art.files and "data/table3_runs.csv" in art.files
    html = render.render_html("t", "s", True, [section])
    assert '<td class="NOTREP">' in html and '<td class="SKIP">' in html
    assert build.table3_block(art, Context(Config()), None).title == "Table 3: parameter counts"


def test_tmin_report_table3_passes_the_runs_to_the_report(tmp_path, monkeypatch, restore_logging):
    """The flag reads and checks DIR before the claims run and hands the runs to build_report."""
    from transformer_min.cli import main as cli
    from transformer_min.report import build

    seen = {}

    def fake(cfg, out_dir, **kw):
        seen.update(kw)
        return build.ReportResult([], Path(out_dir), [], 0.0)

    monkeypatch.setattr(build, "build_report", fake)
    results = _write(tmp_path / "sweep", MADE_UP)
    assert cli.main(["report", "--quick", "--table3", str(results), "--out", str(tmp_path / "r")]) == 0
    assert len(seen["table3"].results) == len(MADE_UP) and seen["stages"] is None
    assert seen["table3"].planned is None  # no sweep.json in the folder: the measured rows only
    assert cli.main(["report", "--table3", str(results), "--stage", "attention", "--out", str(tmp_path / "r")]) == 2


def test_the_sweep_manifest_gives_every_rows_planned_size(tmp_path):
    """FOLDER/sweep.json (the base the sweep wrote): read back into the same sizes as from the base itself;
    absent, no plan; broken, an error naming it and the fix."""
    base = load_project(REPO / "configs" / "multi30k_de_en.toml", env={}, quiet=True).config
    folder = _write(tmp_path / "ok", MADE_UP)
    assert tm.load_sweep(folder).planned is None
    (folder / "sweep.json").write_text(json.dumps({"steps": 100, "base": config_to_dict(base)}), encoding="utf-8")
    sweep = tm.load_sweep(folder)
    assert sweep.planned == pytest.approx(tm.planned_millions(base)) and len(sweep.results) == len(MADE_UP)
    for bad in ("{", "[]", '{"steps": 1}', '{"base": {"model": {"num_heads": 0}}}'):
        (folder / "sweep.json").write_text(bad, encoding="utf-8")
        with pytest.raises(DataError, match=r"sweep.json: not a sweep's manifest.*fix: delete it"):
            tm.load_sweep(folder)


def test_report_lists_every_row_with_the_plan_and_skips_what_has_no_base():
    """With the plan: all 20 rows in the table. Without a measured base nothing is judged: every conclusion
    is SKIP, the measured rows saying the base is missing."""
    from transformer_min.core.i18n import tr

    set_language("en")
    planned = {v.row: 1.0 for v in plan.VARIANTS}
    blocks = table3_retrained.section(Artifacts(), tm.Sweep(MADE_UP, planned))
    table = next(b for b in blocks if isinstance(b, Table) and b.status_col is None)
    assert [r[0] for r in table.rows] == [v.row for v in plan.VARIANTS]
    no_base = [r for r in MADE_UP if r["row"] != "base"]
    blocks = table3_retrained.section(Artifacts(), tm.Sweep(no_base))
    claims = next(b for b in blocks if isinstance(b, Table) and b.status_col is not None)
    assert {r[3] for r in claims.rows} == {tr("SKIP")}
    why = {r[0].split(":")[0]: r[1] for r in claims.rows}
    assert why["A h=1"] == "base not yet run" and why["A h=4"] == "not yet run"
    assert not any(isinstance(b, Figure) for b in blocks)  # nothing judged, no figure
