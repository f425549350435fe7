"""Section 4, Table 1, measured: FLOPs per layer and maximum path lengths of the four layer types.

| layer                     | complexity per layer | sequential ops | max path length |
| self-attention            | O(n^2 d)             | O(1)           | O(1)            |
| recurrent                 | O(n d^2)             | O(n)           | O(n)            |
| convolutional             | O(k n d^2)           | O(1)           | O(log_k n)      |
| restricted self-attention | O(r n d)             | O(1)           | O(n/r)          |

FLOPs are counted exactly (torch.utils.flop_counter.FlopCounterMode, on the meta device, so nothing
is computed or allocated); the exponents are fitted by least squares on the logs. Path lengths are
measured with derivatives: the number of stacked layers before output position n-1 depends on
input position 0. The `table1` checks run these functions on a small grid, the report on larger ones.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Iterator

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_min.core.i18n import tr
from transformer_min.model.attention import MultiHeadAttention

KINDS = ("self_attention", "recurrent", "convolution", "restricted")
LABELS = {"self_attention": "self-attention", "recurrent": "recurrent", "convolution": "convolutional",
          "restricted": "restricted self-attention"}


# ---------------------------------------------------------------------------------------------
# FLOPs (multiply and add counted separately: a (m x k) @ (k x n) product is 2 m k n FLOPs)
# ---------------------------------------------------------------------------------------------

def count_flops(fn: Callable[[], object]) -> dict[str, int]:
    """Run fn under FlopCounterMode -> {aten op name: FLOPs}."""
    with FlopCounterMode(display=False) as fc:
        fn()
    return {str(op).split(".")[-1]: int(v) for op, v in fc.get_flop_counts().get("Global", {}).items()}


def self_attention_flops(n: int, d: int, num_heads: int = 8) -> dict[str, int]:
    """One multi-head self-attention layer over n positions -> {"attention", "projections", "layer"}.

    attention: Q K^T and A V (2 n^2 d each, summed over heads); projections: W^Q, W^K, W^V, W^O
    (2 n d^2 each). The paper's O(n^2 d) is the attention part.
    """
    h = num_heads if d % num_heads == 0 else 1
    with torch.device("meta"):
        mha = MultiHeadAttention(d, h)
        x = torch.empty(1, n, d)
        ops = count_flops(lambda: mha(query=x, key=x, value=x, need_weights=True))  # the explicit eq. (1) path
    attn = sum(v for op, v in ops.items() if op in ("bmm", "baddbmm", "matmul"))
    total = sum(ops.values())
    return {"attention": attn, "projections": total - attn, "layer": total}


def recurrent_flops_formula(rnn: nn.RNN, n: int) -> int:
    """Exact matmul FLOPs of a one-layer nn.RNN over n steps, from its weight shapes:
    each step computes W_ih x_t and W_hh h_{t-1}: n (2 d_in d + 2 d d)."""
    return n * sum(2 * w.shape[0] * w.shape[1] for name, w in rnn.named_parameters() if name.startswith("weight"))


def recurrent_flops(n: int, d: int, counter: bool = True) -> int:
    """One recurrent layer (nn.RNN, d -> d) over n steps. counter=True runs FlopCounterMode (which
    sees the per-step matmuls); counter=False uses the exact formula (fast for long sequences)."""
    with torch.device("meta"):
        rnn = nn.RNN(d, d, batch_first=True)
        if not counter:
            return recurrent_flops_formula(rnn, n)
        x = torch.empty(1, n, d)
        return sum(count_flops(lambda: rnn(x)).values())


def convolution_flops(n: int, d: int, k: int) -> int:
    """One convolutional layer (nn.Conv1d, d -> d channels, kernel k, "same" padding) over n positions."""
    with torch.device("meta"):
        conv = nn.Conv1d(d, d, k, padding=k // 2)
        x = torch.empty(1, d, n)
        return sum(count_flops(lambda: conv(x)).values())


def restricted_attention(q: Tensor, k: Tensor, v: Tensor, r: int) -> Tensor:
    """Self-attention restricted to a neighbourhood of r positions around each query (section 4).

    q, k, v (B, n, d) -> (B, n, d). Each query sees the r keys k[i - r//2 .. i - r//2 + r - 1]
    (those outside the sequence are masked): r n d work instead of n^2 d.
    """
    B, n, d = q.shape
    lo = r // 2
    kw = F.pad(k, (0, 0, lo, r - 1 - lo)).unfold(1, r, 1)  # (B, n, d, r): the window of each query
    vw = F.pad(v, (0, 0, lo, r - 1 - lo)).unfold(1, r, 1)
    scores = torch.einsum("bnd,bndr->bnr", q, kw) / math.sqrt(d)  # (B, n, r)
    pos = torch.arange(n, device=q.device)[:, None] - lo + torch.arange(r, device=q.device)  # (n, r) key index
    valid = (pos >= 0) & (pos < n)
    scores = scores.masked_fill(~valid, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1).masked_fill(~valid, 0.0)
    return torch.einsum("bnr,bndr->bnd", weights, vw)  # (B, n, d)


def restricted_flops(n: int, d: int, r: int) -> int:
    """The attention part (scores and weighted sum) of restricted self-attention: 4 r n d."""
    with torch.device("meta"):
        x = torch.empty(1, n, d)
        return sum(count_flops(lambda: restricted_attention(x, x, x, r)).values())


def fit_exponents(rows: list[dict], variables: tuple[str, ...], key: str = "flops") -> dict[str, float]:
    """Least squares on the logs: log flops = sum_v e_v log v + c -> {v: e_v}."""
    X = np.array([[math.log(row[v]) for v in variables] + [1.0] for row in rows])
    y = np.array([math.log(row[key]) for row in rows])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return {v: float(c) for v, c in zip(variables, coef[:-1])}


def flop_grid(ns, ds, ks=(3,), rs=(8,), rnn_counter_max_n: int = 64) -> dict[str, list[dict]]:
    """FLOPs of the four layer types over the grid -> {kind: [{"n", "d", ("k"|"r"), "flops", ...}]}."""
    out: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for n in ns:
        for d in ds:
            sa = self_attention_flops(n, d)
            out["self_attention"].append({"n": n, "d": d, "flops": sa["attention"], "layer": sa["layer"]})
            counted = n <= rnn_counter_max_n
            out["recurrent"].append({"n": n, "d": d, "flops": recurrent_flops(n, d, counter=counted),
                                     "counted_by": "FlopCounterMode" if counted else "formula"})
            for k in ks:
                out["convolution"].append({"n": n, "d": d, "k": k, "flops": convolution_flops(n, d, k)})
            for r in rs:
                if r <= n:
                    out["restricted"].append({"n": n, "d": d, "r": r, "flops": restricted_flops(n, d, r)})
    return out


def crossover(grid: dict[str, list[dict]]) -> tuple[bool, list[str]]:
    """Is self-attention (n^2 d part) cheaper than recurrent exactly when n < d? -> (holds, lines)."""
    rnn = {(x["n"], x["d"]): x["flops"] for x in grid["recurrent"]}
    holds, lines = True, []
    for x in grid["self_attention"]:
        key = (x["n"], x["d"])
        if key in rnn and x["n"] != x["d"]:
            holds &= (x["flops"] < rnn[key]) == (x["n"] < x["d"])
    for d in sorted({x["d"] for x in grid["self_attention"]}):
        cheaper = [x["n"] for x in grid["self_attention"] if x["d"] == d and x["flops"] < rnn[(x["n"], d)]]
        dearer = [x["n"] for x in grid["self_attention"] if x["d"] == d and x["flops"] > rnn[(x["n"], d)]]
        lines.append(tr("d {d}: self-attention cheaper at n in {cheaper}, dearer at n in {dearer}").format(
            d=f"{d:5d}", cheaper=cheaper, dearer=dearer))
    return holds, lines


# ---------------------------------------------------------------------------------------------
# Maximum path length: stacked layers before output n-1 depends on input 0
# ---------------------------------------------------------------------------------------------

class JacobiRNN(nn.Module):
    """One synchronous step of a tanh recurrence at every position: h_t <- tanh(W x_t + U h_{t-1} + b).

    Stacking L of these (h = 0 first) computes the first L time steps of nn.RNN exactly: the unrolled
    RNN seen as layers, one sequential step per layer.
    """

    def __init__(self, rnn: nn.RNN):
        super().__init__()
        self.rnn = rnn

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        prev = F.pad(h, (0, 0, 1, 0))[:, :-1]  # h_{t-1}, zero before the first position
        r = self.rnn
        return torch.tanh(x @ r.weight_ih_l0.T + r.bias_ih_l0 + prev @ r.weight_hh_l0.T + r.bias_hh_l0)


def stacked_layers(kind: str, n: int, d: int, k: int, r: int, max_layers: int) -> Callable[[Tensor], Iterator[Tensor]]:
    """-> f(x) yielding the output after 1, 2, ..., max_layers stacked layers of `kind` (lazily)."""
    torch.manual_seed(0)
    if kind == "recurrent":
        step = JacobiRNN(nn.RNN(d, d, batch_first=True).double())

        def run(x):
            h = torch.zeros_like(x)
            for _ in range(max_layers):
                h = step(x, h)
                yield h
        return run
    if kind in ("self_attention", "restricted"):
        mask = None
        if kind == "restricted":  # the same window as restricted_attention: keys i - r//2 .. i - r//2 + r - 1
            offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # (n, n): key - query
            mask = (offset >= -(r // 2)) & (offset < r - r // 2)

        def run(x):
            for _ in range(max_layers):
                layer = MultiHeadAttention(d, 1).double()
                x = layer(query=x, key=x, value=x, mask=mask, need_weights=True)[0]
                yield x
        return run
    dilated = kind == "dilated_convolution"

    def run(x):
        y = x.transpose(1, 2)  # (B, d, n)
        for i in range(max_layers):
            conv = nn.Conv1d(d, d, k, dilation=k ** i if dilated else 1).double()
            y = conv(F.pad(y, ((k - 1) * conv.dilation[0], 0)))  # causal: t sees t - (k-1) dilation .. t
            yield y.transpose(1, 2)
    return run


def path_length(kind: str, n: int, d: int = 4, k: int = 3, r: int = 3, max_layers: int | None = None) -> int | None:
    """Fewest stacked layers of `kind` for which output n-1 depends on input 0.

    The derivative of output n-1 with respect to input 0 is taken in forward mode (one pass, a
    random tangent on input 0 only): it is exactly 0 until a path exists, non-zero from then on.
    kind: self_attention, recurrent (unrolled: one time step per layer), convolution (causal,
    kernel k), dilated_convolution (causal, dilation k^layer), restricted (window of r).
    None if not reached within max_layers (default n + 1).
    """
    max_layers = max_layers or n + 1
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, n, d, dtype=torch.float64, generator=g)
    tangent = torch.zeros_like(x)
    tangent[0, 0] = torch.randn(d, dtype=torch.float64, generator=g)  # perturb input position 0 only
    with torch.no_grad(), fwAD.dual_level(), warnings.catch_warnings():
        # the first make_dual loads torch's forward-AD decompositions, which calls the deprecated torch.jit.script
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
        dual = fwAD.make_dual(x, tangent)
        for depth, y in enumerate(stacked_layers(kind, n, d, k, r, max_layers)(dual), start=1):
            if fwAD.unpack_dual(y).tangent[0, n - 1].abs().max().item() > 0:
                return depth
    return None


def expected_path_length(kind: str, n: int, k: int = 3, r: int = 3) -> int:
    """What Table 1 predicts for our constructions (the exact forms behind O(1), O(n), O(n/k), O(log_k n), O(n/r))."""
    return {"self_attention": 1,
            "recurrent": n,
            "convolution": math.ceil((n - 1) / (k - 1)),
            "dilated_convolution": max(1, math.ceil(math.log(n) / math.log(k) - 1e-12)),
            "restricted": math.ceil((n - 1) / (r - 1 - r // 2))}[kind]
