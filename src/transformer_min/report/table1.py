"""Table 1 of section 4, measured: FLOPs over a grid of n and d, fitted exponents, the n < d
crossover and the maximum path lengths. The measuring functions are the `table1` checks' own
(`verify.complexity`)."""

from __future__ import annotations

from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure, Table, Text
from transformer_min.verify import complexity as t1
from transformer_min.core.figure import ftr, new_figure
from transformer_min.core.i18n import tr

PAPER = {  # Table 1: complexity per layer, sequential operations, maximum path length
    "self_attention": ("O(n^2 d)", "O(1)", "O(1)"),
    "recurrent": ("O(n d^2)", "O(n)", "O(n)"),
    "convolution": ("O(k n d^2)", "O(1)", "O(log_k n) dilated, O(n/k) contiguous"),
    "restricted": ("O(r n d)", "O(1)", "O(n/r)"),
}
VARIABLES = {"self_attention": ("n", "d"), "recurrent": ("n", "d"), "convolution": ("k", "n", "d"),
             "restricted": ("r", "n", "d")}
PATH_KINDS = {"self_attention": {}, "recurrent": {}, "convolution": {"k": 3}, "dilated_convolution": {"k": 2},
              "restricted": {"r": 3}}
PATH_LABELS = {"self_attention": "self-attention", "recurrent": "recurrent (unrolled)",
               "convolution": "convolution, k = 3", "dilated_convolution": "dilated convolution, k = 2",
               "restricted": "restricted self-attention, r = 3"}
KS, RS = (3, 7), (8, 32)


def measure(quick: bool) -> dict:
    if quick:
        ns, ds, counter_max, path_ns = (16, 32, 64, 128, 256, 512), (64, 256, 1024), 64, (4, 8, 16)
    else:
        ns = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
        ds = (64, 128, 256, 512, 1024)
        counter_max, path_ns = 256, (4, 8, 16, 32, 64)
    grid = t1.flop_grid(ns, ds, ks=KS, rs=RS, rnn_counter_max_n=counter_max)
    fits = {kind: t1.fit_exponents(grid[kind], VARIABLES[kind]) for kind in t1.KINDS}
    paths = {kind: {n: t1.path_length(kind, n, **kw) for n in path_ns} for kind, kw in PATH_KINDS.items()}
    expected = {kind: {n: t1.expected_path_length(kind, n, **kw) for n in path_ns} for kind, kw in PATH_KINDS.items()}
    holds, _ = t1.crossover(grid)
    return {"ns": ns, "ds": ds, "counter_max": counter_max, "grid": grid, "fits": fits, "paths": paths,
            "expected": expected, "crossover": holds, "path_ns": path_ns}


def _at(grid: dict, kind: str, n: int, d: int, **kw) -> int:
    """FLOPs of grid point (n, d) (and k or r) of one layer type."""
    return next(x["flops"] for x in grid[kind]
                if x["n"] == n and x["d"] == d and all(x.get(k) == v for k, v in kw.items()))


def section(art: Artifacts, quick: bool) -> list:
    m = measure(quick)
    grid, fits = m["grid"], m["fits"]
    n0 = 512
    d0 = 512 if 512 in m["ds"] else max(m["ds"])  # the quick grid has no d = 512
    example = {"self_attention": _at(grid, "self_attention", n0, d0), "recurrent": _at(grid, "recurrent", n0, d0),
               "convolution": _at(grid, "convolution", n0, d0, k=3),
               "restricted": _at(grid, "restricted", n0, d0, r=32)}
    rows = []
    for kind in t1.KINDS:
        fit = ", ".join(f"{v}^{fits[kind][v]:.3f}" for v in VARIABLES[kind])
        rows.append([tr(t1.LABELS[kind]), PAPER[kind][0], fit, f"{example[kind]:,}", PAPER[kind][1],
                     tr(PAPER[kind][2])])
    table = Table(["layer", "complexity (paper)", "fitted FLOPs (ours)",
                   tr("FLOPs at n = 512, d = {d}").format(d=d0), "sequential ops (paper)", "max path length (paper)"],
                  rows)

    path_rows = [[tr(PATH_LABELS[k])] + [f"{m['paths'][k][n]} ({m['expected'][k][n]})" for n in m["path_ns"]]
                 for k in PATH_KINDS]
    path_table = Table(["layer stack"] + [f"n = {n}" for n in m["path_ns"]], path_rows,
                       caption=tr("Measured layers until output n-1 depends on input 0 (expected in brackets)"))
    sa_layer = next(x for x in grid["self_attention"] if x["n"] == n0 and x["d"] == d0)
    blocks = [
        Text(tr("FLOPs are counted exactly with `torch.utils.flop_counter.FlopCounterMode` on the meta device "
                "(nothing is computed), over n in {ns} and d in {ds}, with kernel widths k in "
                "{ks} and neighbourhoods r in {rs}; a multiply and an add count as 2 FLOPs. Exponents are "
                "least-squares fits on the logs. Self-attention is the attention part, Q K^T and A V (4 n^2 d); the "
                "whole layer adds the four projections, 8 n d^2 (at n = 512, d = {d0}: {layer:,} FLOPs). "
                "The recurrent layer is `torch.nn.RNN`: FlopCounterMode sees its per-step matrix products, and it is "
                "counted that way up to n = {counter_max}; beyond, from its weight shapes by the exact formula "
                "n (2 d_in d + 2 d^2), which equals the counter wherever both are run. Convolution: `torch.nn.Conv1d` "
                "d -> d channels. Restricted self-attention: each query attends to a window of r keys.").format(
            ns=list(m['ns']), ds=list(m['ds']), ks=list(KS), rs=list(RS), d0=d0, layer=sa_layer['layer'],
            counter_max=m['counter_max'])),
        table,
        Text(tr("Crossover. Self-attention (4 n^2 d) is cheaper than the recurrent layer (4 n d^2) exactly when n < d: "
                "{verdict} on every grid point with n != d. The ratio is n / d; "
                "with the projections included a self-attention layer costs 8 n d^2 + 4 n^2 d, which Table 1 leaves "
                "out (the projections are the same order as one recurrent layer).").format(
            verdict=tr("holds") if m['crossover'] else tr("DOES NOT HOLD"))),
        Table(["d", "self-attention cheaper at n", "equal at n", "recurrent cheaper at n"], _crossover_rows(grid)),
        Text(tr("Maximum path length: stack layers of one type on n positions and count how many are needed before "
                "output n-1 depends on input 0 (its derivative, taken in forward mode, becomes non-zero). The "
                "recurrent layer is unrolled: one time step per layer, which is what its n sequential operations "
                "mean. The convolutions are causal; the dilated stack uses dilation k^layer.")),
        path_table,
        _flops_plot(art, m, d0),
        _path_plot(art, m),
    ]
    return blocks


def _crossover_rows(grid: dict) -> list[list[str]]:
    rnn = {(x["n"], x["d"]): x["flops"] for x in grid["recurrent"]}
    rows = []
    for d in sorted({x["d"] for x in grid["self_attention"]}):
        sa = [(x["n"], x["flops"], rnn[(x["n"], d)]) for x in grid["self_attention"] if x["d"] == d]
        pick = [", ".join(str(n) for n, a, r in sa if test(a, r)) or "-"
                for test in (lambda a, r: a < r, lambda a, r: a == r, lambda a, r: a > r)]
        rows.append([str(d), *pick])
    return rows


def _flops_plot(art: Artifacts, m: dict, d0: int) -> Figure:
    grid, ns = m["grid"], m["ns"]
    fig, ax = new_figure((7.5, 4.2))
    series = {
        "self-attention (Q K^T, A V)": [(x["n"], x["flops"]) for x in grid["self_attention"] if x["d"] == d0],
        "self-attention layer (+ projections)": [(x["n"], x["layer"]) for x in grid["self_attention"] if x["d"] == d0],
        "recurrent (nn.RNN)": [(x["n"], x["flops"]) for x in grid["recurrent"] if x["d"] == d0],
        "convolution, k = 3": [(x["n"], x["flops"]) for x in grid["convolution"] if x["d"] == d0 and x["k"] == 3],
        "restricted self-attention, r = 32": [(x["n"], x["flops"]) for x in grid["restricted"]
                                              if x["d"] == d0 and x["r"] == 32],
    }
    for label, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if "layer" in label else "o-", label=ftr(label), ms=4)
    ax.axvline(d0, color="#888", lw=0.8, ls=":")
    ax.text(d0, 0.03, " n = d", fontsize=8, color="#555", transform=ax.get_xaxis_transform())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(ftr("sequence length n"))
    ax.set_ylabel(ftr("FLOPs per layer"))
    ax.set_title(ftr("Table 1 measured, d = {d}").format(d=d0), fontsize=10)
    ax.legend(fontsize=8)
    rows = []
    for kind in t1.KINDS:
        for x in grid[kind]:
            rows.append([kind, x["n"], x["d"], x.get("k", ""), x.get("r", ""), x["flops"], x.get("layer", ""),
                         x.get("counted_by", "FlopCounterMode")])
    data = art.csv("table1_flops.csv", ["kind", "n", "d", "k", "r", "flops", "layer_flops", "counted_by"], rows)
    return art.figure("table1_flops", fig, tr("FLOPs against sequence length n (log-log). Self-attention grows as "
                                              "n^2, the others as n; self-attention is below the recurrent layer "
                                              "while n < d."), [data])


def _path_plot(art: Artifacts, m: dict) -> Figure:
    fig, ax = new_figure((6.5, 3.8))
    for kind in PATH_KINDS:
        ax.plot(m["path_ns"], [m["paths"][kind][n] for n in m["path_ns"]], "o-", label=ftr(PATH_LABELS[kind]), ms=4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(ftr("sequence length n"))
    ax.set_ylabel(ftr("layers until position n-1 sees position 0"))
    ax.legend(fontsize=8)
    data = art.csv("table1_path_length.csv", ["kind", "n", "measured", "expected"],
                   ([k, n, m["paths"][k][n], m["expected"][k][n]] for k in PATH_KINDS for n in m["path_ns"]))
    return art.figure("table1_path_length", fig, tr("Maximum path length, measured: constant for self-attention, "
                                                    "logarithmic for dilated convolutions, linear for the rest."),
                      [data])
