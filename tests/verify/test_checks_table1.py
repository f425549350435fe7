"""verify/complexity.py, what the table1 checks measure with: the FLOP counters, the exponent fit, restricted
attention, path lengths."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_min.model.attention import scaled_dot_product_attention
from transformer_min.verify import complexity




@pytest.mark.parametrize("n,d", [(8, 16), (32, 64), (100, 24)])
def test_flop_counts_are_exact(n, d):
    sa = complexity.self_attention_flops(n, d)
    assert sa["attention"] == 4 * n * n * d
    assert sa["projections"] == 8 * n * d * d
    rnn = complexity.recurrent_flops
    assert rnn(n, d, counter=True) == rnn(n, d, counter=False) == 4 * n * d * d
    assert complexity.convolution_flops(n, d, 3) == 2 * 3 * n * d * d
    assert complexity.restricted_flops(n, d, 4) == 4 * 4 * n * d


def test_fit_recovers_known_exponents():
    rows = [{"n": n, "d": d, "flops": 3.0 * n ** 1.5 * d ** 0.5} for n in (4, 16, 64) for d in (8, 32)]
    fit = complexity.fit_exponents(rows, ("n", "d"))
    assert fit["n"] == pytest.approx(1.5) and fit["d"] == pytest.approx(0.5)


def test_restricted_attention_equals_band_masked_attention():
    g = torch.Generator().manual_seed(0)
    n, d, r = 9, 6, 4
    q, k, v = (torch.randn(2, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    band = (offset >= -(r // 2)) & (offset < r - r // 2)
    want, _ = scaled_dot_product_attention(q, k, v, band)
    assert torch.allclose(complexity.restricted_attention(q, k, v, r), want, atol=1e-12)


def test_unrolled_rnn_after_n_layers_is_the_rnn():
    torch.manual_seed(0)
    rnn = nn.RNN(5, 5, batch_first=True).double()
    x = torch.randn(1, 7, 5, dtype=torch.float64)
    step, h = complexity.JacobiRNN(rnn), torch.zeros_like(x)
    for _ in range(7):
        h = step(x, h)
    want, _ = rnn(x)
    assert torch.allclose(h, want, atol=1e-12)


@pytest.mark.parametrize("kind,kw", [("self_attention", {}), ("recurrent", {}), ("convolution", {"k": 3}),
                                     ("dilated_convolution", {"k": 2}), ("restricted", {"r": 3}),
                                     ("restricted", {"r": 5}), ("convolution", {"k": 5})])
def test_path_lengths_match_table_1(kind, kw):
    for n in (5, 12):
        assert complexity.path_length(kind, n, **kw) == complexity.expected_path_length(kind, n, **kw)


def test_path_length_none_when_out_of_reach():
    assert complexity.path_length("recurrent", 10, max_layers=3) is None


def test_crossover_is_exactly_n_less_than_d():
    grid = complexity.flop_grid((16, 64), (32,), ks=(3,), rs=(8,), rnn_counter_max_n=0)
    holds, lines = complexity.crossover(grid)
    assert holds and lines == ["d    32: self-attention cheaper at n in [16], dearer at n in [64]"]


def test_expected_dilated_path_is_log_k():
    assert [complexity.expected_path_length("dilated_convolution", n, k=2) for n in (2, 4, 5, 8, 9)] == [1, 2, 3, 3, 4]
    assert complexity.expected_path_length("dilated_convolution", 27, k=3) == round(math.log(27, 3))
