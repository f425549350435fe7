"""`tmin report --table3 DIR`: Table 3 retrained at small scale, beside the exact parameter counts.

The measured table, one claim row per (row, metric) verdict (PASS where the paper's conclusion holds beyond
noise, "not reproduced at this scale" otherwise: never FAIL, and not counted with the registered claims),
and the figure of Δ BLEU per row, ours against the paper. The rule is `report.table3_measured`'s.
"""

from __future__ import annotations

from transformer_min.core.figure import ftr, new_figure
from transformer_min.core.i18n import tr
from transformer_min.report import table3_budgets as tb
from transformer_min.report import table3_measured as tm
from transformer_min.report import table3_plan as plan
from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure, Heading, Table, Text
from transformer_min.verify.summary import summarize

NOT_REPRODUCED = "not reproduced at this scale"
METRIC_NAMES = {"val_ppl": "val PPL", "val_bleu": "val BLEU"}


def verdict_text(verdict: str) -> str:
    return tr(verdict)


def claim_text(row: str, metric: str) -> str:
    """What the paper's row says about the metric, in the report's language."""
    paper, base = tm.paper_value(row, metric), tm.paper_value(plan.BASE.row, metric)
    digits = 2 if metric == "val_ppl" else 1
    fields = {"row": row, "metric": METRIC_NAMES[metric], "paper": f"{paper:.{digits}f}", "base": f"{base:.{digits}f}"}
    delta = tm.paper_change(row, metric)
    if tm.is_flat(delta, metric):
        return tr("{row}: {metric} about the same as base (paper {paper} against {base})").format(**fields)
    if delta > 0:
        return tr("{row}: {metric} higher than base (paper {paper} against {base})").format(**fields)
    return tr("{row}: {metric} lower than base (paper {paper} against {base})").format(**fields)


def claim_rows(judged: list[tm.Judged], measured: set[str] | None = None,
               longer: list[tb.BudgetClaim] = ()) -> list[list[str]]:
    """[claim, measured, verdict, status] per (row, metric) of the paper's table, in its order: judged ones
    PASS or "not reproduced at this scale"; the others SKIP, saying why (the row, or the base, not yet run).
    `measured`: the rows with a finished run (default: the judged ones). `longer`: the (row, metric)s measured
    at longer budgets (`table3_budgets.claims`), judged at the largest budget instead, which the row names."""
    by = {(j.row, j.metric): j for j in judged}
    by_budget = {(c.row, c.metric): c for c in longer}
    measured = {j.row for j in judged} if measured is None else measured
    rows = []
    for v in plan.VARIANTS:
        if v is plan.BASE:
            continue
        for m in tm.JUDGED:
            c = by_budget.get((v.row, m))
            if c is not None:
                b, j = c.last
                noise = "?" if j.noise is None else f"{j.noise:.2f}"
                got = tr("ours {delta} from base at {updates} updates (noise {noise}, {n} seeds)").format(
                    delta=f"{j.ours_delta:+.2f}", updates=f"{b:,}", noise=noise, n=j.ours.n)
                rows.append([claim_text(v.row, m), got, tb.claim_line(c),
                             tr("PASS") if c.holds else tr(NOT_REPRODUCED)])
                continue
            j = by.get((v.row, m))
            if j is None:
                why = tr("base not yet run") if v.row in measured else tr("not yet run")
                rows.append([claim_text(v.row, m), why, "", tr("SKIP")])
                continue
            noise = "?" if j.noise is None else f"{j.noise:.2f}"
            got = tr("ours {delta} from base (noise {noise}, {n} seeds)").format(
                delta=f"{j.ours_delta:+.2f}", noise=noise, n=j.ours.n)
            rows.append([claim_text(j.row, m), got, verdict_text(j.verdict),
                         tr("PASS") if j.holds else tr(NOT_REPRODUCED)])
    return rows


def section(art: Artifacts, sweep: tm.Sweep) -> list:
    """The blocks added to the Table 3 section. With the sweep's plan (its sweep.json), the table lists every
    row of the paper's, the unrun ones marked; every (row, metric) conclusion not judged is a SKIP claim row."""
    results = sweep.results
    b = tm.budget(results)
    rows = tm.table_rows(results, sweep.planned)
    judged = tm.judge(tm.stats(results))
    longer = tb.claims(list(sweep.budgets))
    claims = claim_rows(judged, {r["row"] for r in results}, longer)
    data = art.csv("table3_measured.csv", tm.HEADERS, rows)
    runs = art.csv("table3_runs.csv", ["row", "seed", "updates", "tokens_per_update", "val_ppl", "val_bleu",
                                       "test_bleu", "params"],
                   [[r["row"], r["seed"], r["updates"], r["tokens_per_update"], r["val_ppl"], r["val_bleu"],
                     r["test_bleu"], r["params"]] for r in sorted(results, key=lambda r: (r["row"], r["seed"]))])
    # One count for every surface (verify.summary): PASS holds, "not reproduced" is counted as not holding,
    # a conclusion not yet judged is a SKIP, never a PASS.
    status = {tr("PASS"): "PASS", tr("SKIP"): "SKIP"}
    counts = summarize((r[0], status.get(r[3], "FAIL")) for r in claims)
    held, judged_n = len(counts.passed), len(counts.passed) + len(counts.failed)
    blocks = [
        Heading(tr("Table 3 retrained at small scale"), id="table3-measured"),
        Text(tr("Each row of the paper's Table 3 retrained on Multi30k De->En from one small base (d_model 256, "
                "h 4, d_ff 1024, N 3), its change scaled by the paper's ratio (`benchmarks/table3.py`, "
                "docs/results.md). One budget for every run: {updates} updates of about {tokens} target tokens "
                "({device}). Measured as the paper does: the dev set (val), the last checkpoint, no averaging; "
                "val PPL per wordpiece, val BLEU with beam 4 and alpha 0.6; test BLEU (test_2016_flickr) is an "
                "extra column. Ours: mean ± half the spread over the seeds.").format(
            updates=f"{b['updates']:,}", tokens=f"{b['tokens_per_update']:,.0f}", device=b["device"])),
        Table(tm.HEADERS, [[r[0], tr(r[1]), *r[2:-2], *(verdict_text(c) if c else "" for c in r[-2:])]
                           for r in rows]),
        Text(tr("Noise is the larger seed spread (max - min) of the row and of the base. Agrees: our change is "
                "beyond the noise, in the paper's direction; opposite: beyond it, the other way; within noise: no "
                "larger than the noise. A change the paper prints as none (within 0.1 BLEU or 0.01 PPL) holds "
                "when ours is within noise.")),
        Table(["claim", "measured", "verdict", "result"], claims, status_col=3),
        Text(tr("{held} of {n} Table 3 conclusions hold beyond noise at this scale; the others are marked \"not "
                "reproduced at this scale\". These rows are measurements of one sweep: they are not among the "
                "registered claims above and never count as PASS or FAIL there.").format(held=held, n=judged_n)),
    ]
    if counts.skipped:
        blocks.append(Text(tr("{skipped} of the table's {total} conclusions are not judged yet (SKIP): their row or "
                              "the base has no finished run in this folder.").format(
            skipped=len(counts.skipped), total=counts.total)))
    if judged:
        blocks.append(delta_figure(art, judged, [data, runs]))
    if sweep.budgets:
        blocks += budget_blocks(art, list(sweep.budgets), longer)
    return blocks


def budget_blocks(art: Artifacts, points: list[dict], longer: list[tb.BudgetClaim]) -> list:
    """Table 3 at longer budgets: per row and budget the change from the base with its noise and the verdicts,
    the claims followed over the budgets, and the figure of Δ val BLEU against updates."""
    rows = tb.table_rows(points)
    data = art.csv("table3_budgets.csv", tb.HEADERS, rows)
    budgets = ", ".join(f"{b:,}" for b in tb.budgets_of(points))
    return [
        Heading(tr("Table 3 at longer budgets"), id="table3-budgets"),
        Text(tr("The rows whose verdicts at one budget oppose the paper, and the base, trained further: one run per "
                "row and seed, measured at updates {budgets} on the way (eq. (3) does not depend on the total, so "
                "each point is the model of that budget). Each budget is judged by the rule above, the row's seeds "
                "against the base's at the same update. The claim rows above use the largest budget measured; "
                "train NLL is the mean over the last 100 updates (dropout on), val NLL the dev set's: their gap "
                "is what dropout acts on.").format(budgets=budgets)),
        Table(tb.HEADERS, rows),
        *([Text(tr("Warning: these points were trained on more than one kind of CPU ({classes}); fp32 rounds "
                   "differently on each, so a change between them can be the machine's. Compare points of one "
                   "kind.").format(classes="; ".join(tb.cpu_classes(points))))]
          if len(tb.cpu_classes(points)) > 1 else []),
        *(Text(tb.claim_line(c)) for c in longer),
        tb.budget_figure(art, points, [data]),
    ]


def delta_figure(art: Artifacts, judged: list[tm.Judged], data: list[str]) -> Figure:
    """Δ BLEU per row: the paper's change and ours, with our noise band as the error bar."""
    bleu = [j for j in judged if j.metric == "val_bleu"]
    x = list(range(len(bleu)))
    fig, ax = new_figure((9, 3.8))
    ax.bar([i - 0.2 for i in x], [j.paper_delta for j in bleu], 0.4, color="#999", label=ftr("paper (newstest2013)"))
    ax.errorbar([i + 0.2 for i in x], [j.ours_delta for j in bleu],
                yerr=[j.noise or 0.0 for j in bleu], fmt="o", color="#3b75af", capsize=3,
                label=ftr("ours (Multi30k val), ± noise"))
    ax.axhline(0, color="#333", lw=0.8)
    ax.set_xticks(x, [j.row for j in bleu], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel(ftr("Δ BLEU from base"))
    ax.legend(fontsize=8)
    return art.figure("table3_delta_bleu", fig, tr(
        "Change in val BLEU from the base, per Table 3 row: the paper's (bars) and ours (mean over seeds; the "
        "error bar is the noise, the larger seed spread of the row and the base: a bar that crosses zero is "
        "within noise)."), data)
