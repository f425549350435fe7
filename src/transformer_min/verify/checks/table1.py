"""Stage `table1`: Table 1 of section 4 measured: FLOPs per layer and maximum path lengths.

The measuring functions are in `verify.complexity` (FlopCounterMode on the meta device for FLOPs, forward-mode
derivatives for path lengths); the checks here run them on a small grid and compare with Table 1's orders.
"""

from __future__ import annotations

from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, register
from transformer_min.verify.complexity import (crossover, expected_path_length, fit_exponents, flop_grid,
                                               path_length, recurrent_flops)

STAGES = (Stage("table1", "Why self-attention: Table 1 measured", "4, Table 1"),)

CHECK_NS, CHECK_DS = (16, 32, 64, 128), (32, 64, 128)


def _grid(ctx: Context) -> dict[str, list[dict]]:
    return ctx.memo("table1.grid", lambda: flop_grid(CHECK_NS, CHECK_DS, ks=(3, 5), rs=(4, 16), rnn_counter_max_n=0))


def _fit_result(rows: list[dict], variables: tuple[str, ...], want: dict[str, float], tol: float = 0.01,
                lines: list[str] | None = None) -> Result:
    fit = fit_exponents(rows, variables)
    ok = all(abs(fit[v] - want[v]) < tol for v in variables)
    got = ", ".join(f"{v}^{fit[v]:.3f}" for v in variables)
    expected = ", ".join(f"{v}^{want[v]:g}" for v in variables) + f" (+-{tol})"
    return Result(ok, tr("FLOPs ~ {got} ({n_rows} sizes)").format(got=got, n_rows=len(rows)), expected, lines or [])


@register("table1.self_attention_flops_n2d", "table1", "4, Table 1",
          "self-attention costs O(n^2 d) per layer (the Q K^T and A V products; the projections add 8 n d^2)",
          "EXACT", "transformer_min.model.attention.scaled_dot_product_attention")
def sa_flops(ctx: Context) -> Result:
    rows = _grid(ctx)["self_attention"]
    n, d = 64, 128
    r = next(x for x in rows if x["n"] == n and x["d"] == d)
    lines = [tr("n {n}, d {d}: attention {attention} = 4 n^2 d = {formula}; whole layer {layer} = 8 n d^2 + 4 n^2 d = "
                "{layer_formula}").format(n=n, d=d, attention=f"{r['flops']:,}", formula=f"{4 * n * n * d:,}",
                                          layer=f"{r['layer']:,}", layer_formula=f"{8 * n * d * d + 4 * n * n * d:,}")]
    res = _fit_result(rows, ("n", "d"), {"n": 2, "d": 1}, lines=lines)
    exact = all(x["flops"] == 4 * x["n"] ** 2 * x["d"]
                and x["layer"] == 8 * x["n"] * x["d"] ** 2 + 4 * x["n"] ** 2 * x["d"] for x in rows)
    return Result(res.passed and exact, res.measured, res.expected, res.lines)


@register("table1.recurrent_flops_nd2", "table1", "4, Table 1",
          "a recurrent layer costs O(n d^2)", "EXACT", "torch.nn.RNN")
def rnn_flops(ctx: Context) -> Result:
    rows = _grid(ctx)["recurrent"]
    agree = all(recurrent_flops(n, d, counter=True) == recurrent_flops(n, d, counter=False)
                for n, d in ((8, 16), (16, 32)))
    lines = [tr("formula n (2 d_in d + 2 d^2) equals FlopCounterMode on nn.RNN (n, d) = (8, 16), (16, 32): {agree}"
                ).format(agree=agree)]
    res = _fit_result(rows, ("n", "d"), {"n": 1, "d": 2}, lines=lines)
    return Result(res.passed and agree, res.measured, res.expected, res.lines)


@register("table1.convolution_flops_knd2", "table1", "4, Table 1",
          "a convolutional layer with kernel width k costs O(k n d^2)", "EXACT", "torch.nn.Conv1d")
def conv_flops(ctx: Context) -> Result:
    return _fit_result(_grid(ctx)["convolution"], ("k", "n", "d"), {"k": 1, "n": 1, "d": 2})


@register("table1.restricted_flops_rnd", "table1", "4, Table 1",
          "self-attention restricted to a neighbourhood of r costs O(r n d)", "EXACT",
          "transformer_min.verify.complexity.restricted_attention")
def restricted_flops_check(ctx: Context) -> Result:
    return _fit_result(_grid(ctx)["restricted"], ("r", "n", "d"), {"r": 1, "n": 1, "d": 1})


@register("table1.self_attention_cheaper_when_n_lt_d", "table1", "4",
          "self-attention layers are faster than recurrent layers when the sequence length n is smaller "
          "than the representation dimensionality d", "ARITH",
          "transformer_min.model.attention.scaled_dot_product_attention")
def crossover_check(ctx: Context) -> Result:
    holds, lines = crossover(_grid(ctx))
    lines.append(tr("(4 n^2 d against 4 n d^2: the ratio is n / d exactly; the projections, 8 n d^2, are left out "
                    "as in Table 1)"))
    return Result(holds, tr("cheaper iff n < d on the {n_CHECK_NS} x {n_CHECK_DS} grid: {holds}").format(n_CHECK_NS=len(CHECK_NS), n_CHECK_DS=len(CHECK_DS), holds=holds), "True", lines)


PATH_NS = (4, 8, 16)


def _path_result(kind: str, ctx: Context, table: str, **kw) -> Result:
    got = [path_length(kind, n, **kw) for n in PATH_NS]
    want = [expected_path_length(kind, n, **kw) for n in PATH_NS]
    return Result(got == want, tr("{got} layers for n = {list}").format(got=got, list=list(PATH_NS)), f"{want} ({table})")


@register("table1.path_self_attention", "table1", "4, Table 1",
          "self-attention connects all positions with a constant number of operations: path length 1",
          "ARCH", "transformer_min.model.attention.MultiHeadAttention")
def path_sa(ctx: Context) -> Result:
    return _path_result("self_attention", ctx, "O(1)")


@register("table1.path_recurrent", "table1", "4, Table 1",
          "a recurrent layer needs O(n) sequential operations: path length n (one step per unrolled layer)",
          "ARCH", "torch.nn.RNN")
def path_rnn(ctx: Context) -> Result:
    return _path_result("recurrent", ctx, "O(n)")


@register("table1.path_convolution", "table1", "4, Table 1",
          "contiguous convolutions (kernel k) need a stack of O(n/k) layers to connect all positions",
          "ARCH", "torch.nn.Conv1d")
def path_conv(ctx: Context) -> Result:
    return _path_result("convolution", ctx, "ceil((n-1)/(k-1)), k = 3: O(n/k)", k=3)


@register("table1.path_dilated_convolution", "table1", "4, Table 1",
          "dilated convolutions need O(log_k n) layers", "ARCH", "torch.nn.Conv1d")
def path_dilated(ctx: Context) -> Result:
    return _path_result("dilated_convolution", ctx, "ceil(log_k n), k = 2: O(log_k n)", k=2)


@register("table1.path_restricted", "table1", "4, Table 1",
          "self-attention restricted to a neighbourhood of r has maximum path length O(n/r)", "ARCH",
          "transformer_min.model.attention.scaled_dot_product_attention")
def path_restricted(ctx: Context) -> Result:
    return _path_result("restricted", ctx, "ceil((n-1)/(r - 1 - r//2)), r = 3: O(n/r)", r=3)

