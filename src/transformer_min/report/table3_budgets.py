"""Table 3 at longer budgets (`benchmarks/table3.py --long`): the rows whose 1x verdicts oppose the paper,
each trained to 4x the budget in one run and measured at every budget point on the way.

Eq. (3)'s learning rate does not depend on the total number of updates, so one run of 5,824 updates holds the
1x model (update 1,456), the 2x model (2,912) and so on. At each budget the rule is `report.table3_measured`'s,
applied to the points of that budget alone: the row's seeds against the base's seeds at the same update, the
noise the larger seed spread of the two. A row's claim holds when the paper's conclusion holds at the largest
budget measured for both the row and the base; the claim names that budget, and the budget at which its
verdict last changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer_min.core.i18n import tr
from transformer_min.report import table3_measured as tm
from transformer_min.report import table3_plan as plan
from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure

HEADERS = ["row", "ours", "updates", "seeds", "val PPL", "val BLEU", "test BLEU", "train NLL", "val NLL",
           "Δ PPL paper / ours (noise)", "Δ BLEU paper / ours (noise)", "PPL verdict", "BLEU verdict", "s/update"]


def budgets_of(points: list[dict]) -> list[int]:
    """The update counts measured, in increasing order."""
    return sorted({int(p["budget"]) for p in points})


def cpu_classes(points: list[dict]) -> list[str]:
    """The CPU capabilities (and precisions) the points were trained on: one class for a fair comparison. Two
    classes round fp32 differently (another GEMM kernel), which moved the 1,456-update base by 0.6-1.0 val
    BLEU between an AVX2 and an AVX-512 CPU, seed for seed."""
    return sorted({f"{'+'.join(p.get('machine', {}).get('cpu_capability', ['?']))} "
                   f"{'+'.join(p.get('machine', {}).get('precision', ['?']))}" for p in points})


def at_budget(points: list[dict], budget: int) -> list[dict]:
    return [p for p in points if p["budget"] == budget]


def judged_by_budget(points: list[dict]) -> dict[int, list[tm.Judged]]:
    """{budget: every measured non-base row against the base at that budget} (`table3_measured.judge`)."""
    return {b: tm.judge(tm.stats(at_budget(points, b))) for b in budgets_of(points)}


@dataclass(frozen=True)
class BudgetClaim:
    """One (row, metric) conclusion of the paper followed over the budgets."""

    row: str
    metric: str
    steps: tuple[tuple[int, tm.Judged], ...]  # (budget, its judgement), increasing budgets

    @property
    def last(self) -> tuple[int, tm.Judged]:
        return self.steps[-1]

    @property
    def holds(self) -> bool:
        """The paper's conclusion holds at the largest budget measured."""
        return self.last[1].holds

    @property
    def changed_at(self) -> tuple[int, str] | None:
        """(the budget at which the verdict last changed, the verdict before it); None if it never changed."""
        for (_, before), (b, now) in reversed(list(zip(self.steps, self.steps[1:]))):
            if now.verdict != before.verdict:
                return b, before.verdict
        return None


def claims(points: list[dict]) -> list[BudgetClaim]:
    """Every (row, metric) judged at one budget or more, in the paper's row order."""
    by_budget = judged_by_budget(points)
    out = []
    for v in plan.VARIANTS:
        for m in tm.JUDGED:
            steps = tuple((b, j) for b, js in by_budget.items() for j in js if (j.row, j.metric) == (v.row, m))
            if steps:
                out.append(BudgetClaim(v.row, m, steps))
    return out


def claim_line(c: BudgetClaim) -> str:
    """'D P_drop=0.0 val BLEU: agrees at 5,824 updates (opposite until 2,912)' in the report's language."""
    b, j = c.last
    text = tr("{row} {metric}: {verdict} at {updates} updates").format(
        row=c.row, metric=tr(METRIC_NAMES[c.metric]), verdict=tr(j.verdict), updates=f"{b:,}")
    changed = c.changed_at
    if changed is None:
        if len(c.steps) > 1:
            text += tr(" (the same verdict at every budget from {first})").format(first=f"{c.steps[0][0]:,}")
        return text
    return text + tr(" ({before} before {updates})").format(before=tr(changed[1]), updates=f"{changed[0]:,}")


METRIC_NAMES = {"val_ppl": "val PPL", "val_bleu": "val BLEU"}


def _cell(j: tm.Judged | None, digits: int) -> str:
    if j is None:
        return ""
    noise = "?" if j.noise is None else f"{j.noise:.{digits}f}"
    return f"{j.paper_delta:+.{digits}f} / {j.ours_delta:+.{digits}f} ({noise})"


def table_rows(points: list[dict]) -> list[list[str]]:
    """One line per (row, budget): the seeds' means, the train and val NLL, the change from the base at the
    same budget beside the paper's with the noise, the verdicts, and the seconds per update (HEADERS)."""
    by_budget = judged_by_budget(points)
    rows = []
    for v in plan.VARIANTS:
        for b in budgets_of(points):
            mine = sorted((p for p in at_budget(points, b) if p["row"] == v.row), key=lambda p: p["seed"])
            if not mine:
                continue
            judged = {j.metric: j for j in by_budget[b] if j.row == v.row}

            def mean(key: str) -> float:
                return sum(float(p[key]) for p in mine) / len(mine)

            seeds = ",".join(str(p["seed"]) for p in mine)
            rows.append([v.row, tr(v.mapping), f"{b:,}", seeds, f"{mean('val_ppl'):.2f}", f"{mean('val_bleu'):.2f}",
                         f"{mean('test_bleu'):.2f}",
                         f"{mean('train_nll'):.3f}" if all("train_nll" in p for p in mine) else "",
                         f"{mean('val_nll'):.3f}", _cell(judged.get("val_ppl"), 2), _cell(judged.get("val_bleu"), 2),
                         tr(judged["val_ppl"].verdict) if "val_ppl" in judged else "",
                         tr(judged["val_bleu"].verdict) if "val_bleu" in judged else "",
                         f"{mean('seconds_per_update'):.2f}"])
    return rows


def budget_figure(art: Artifacts, points: list[dict], data: list[str]) -> Figure:
    """Δ val BLEU from the base against updates, one line per row with its noise band, and the paper's Δ as
    a mark at the right edge."""
    from transformer_min.core.figure import ftr, new_figure

    by_claim = [c for c in claims(points) if c.metric == "val_bleu"]
    fig, ax = new_figure((8, 4.2))
    colors = ["#3b75af", "#c44e52", "#55a868", "#8172b2", "#ccb974", "#64b5cd", "#937860", "#da8bc3"]
    right = max(budgets_of(points))
    for i, c in enumerate(by_claim):
        color = colors[i % len(colors)]
        xs = [b for b, _ in c.steps]
        ys = [j.ours_delta for _, j in c.steps]
        noise = [j.noise or 0.0 for _, j in c.steps]
        ax.plot(xs, ys, "o-", color=color, label=c.row)
        ax.fill_between(xs, [y - n for y, n in zip(ys, noise)], [y + n for y, n in zip(ys, noise)],
                        color=color, alpha=0.15, lw=0)
        ax.plot([right * 1.04], [c.steps[-1][1].paper_delta], marker="D", color=color, ls="none")
    ax.axhline(0, color="#333", lw=0.8)
    ax.set_xlabel(ftr("updates"))
    ax.set_ylabel(ftr("Δ val BLEU from base"))
    ax.set_xticks(budgets_of(points))
    if by_claim:
        ax.legend(fontsize=8, title=ftr("◆ the paper's Δ"), title_fontsize=8)
    return art.figure("table3_budgets_delta_bleu", fig, tr(
        "Change in val BLEU from the base against the training budget, per Table 3 row (mean over seeds; the band "
        "is the noise, the larger seed spread of the row and the base at that budget); the diamond at the right "
        "is the paper's change."), data)
