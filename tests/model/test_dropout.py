"""model/dropout.py against the definition of (inverted) dropout and against torch's nn.Dropout.

The references are independent of the mask generator: the law of the kept fraction (binomial bounds), the
kept values x / (1 - p) computed here, the gradient of the definition (grad * mask / (1 - p)) and torch's own
F.dropout on the paths that must be it (inference, CUDA-less fallbacks, p = 0).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_min.model.dropout import Dropout, keep_mask
from transformer_min.model.build import encoder_layer


def kept_fraction_bounds(n: int, p: float, sigmas: float = 6.0) -> tuple[float, float]:
    sd = math.sqrt(p * (1 - p) / n)
    return 1 - p - sigmas * sd, 1 - p + sigmas * sd


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_kept_fraction_follows_bernoulli_and_kept_values_are_scaled(p):
    torch.manual_seed(0)
    x = torch.rand(512, 1000) + 0.5  # nonzero everywhere: a zero in the output is a dropped element
    y = Dropout(p).train()(x)
    kept = y != 0
    lo, hi = kept_fraction_bounds(x.numel(), p)
    assert lo < kept.float().mean().item() < hi
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.01  # E[y] = x (inverted dropout)


def test_mask_has_no_structure_across_rows_columns_or_calls():
    torch.manual_seed(1)
    p, shape = 0.1, torch.Size([300, 700])
    a, _ = keep_mask(shape, p)
    b, _ = keep_mask(shape, p)
    n = shape.numel()
    for frac in (a.float().mean(0), a.float().mean(1)):  # every column and row drops at the rate p
        sd = math.sqrt(p * (1 - p) / (n / frac.numel()))
        assert (frac - (1 - p)).abs().max().item() < 6 * sd
    both = (a & b).float().mean().item()  # two calls: independent, P(both kept) = (1 - p)^2
    assert abs(both - (1 - p) ** 2) < 6 * math.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / n)
    assert not torch.equal(a, b)


def test_seeded_by_torch_manual_seed():
    x = torch.randn(64, 128)
    torch.manual_seed(7)
    y1 = Dropout(0.1).train()(x)
    torch.manual_seed(7)
    y2 = Dropout(0.1).train()(x)
    torch.manual_seed(8)
    y3 = Dropout(0.1).train()(x)
    assert torch.equal(y1, y2)
    assert not torch.equal(y1, y3)


def test_backward_is_the_gradient_of_the_definition():
    torch.manual_seed(2)
    x = (torch.rand(40, 30, dtype=torch.float64) + 0.5).requires_grad_()
    y = Dropout(0.2).train()(x)
    mask = (y != 0).to(x.dtype)
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * mask / 0.8)
    torch.testing.assert_close(y, x.detach() * mask / 0.8)


def test_bf16_keeps_dtype_and_scales_like_nn_dropout():
    torch.manual_seed(3)
    x = (torch.rand(256, 256) + 0.5).bfloat16()
    y = Dropout(0.1).train()(x)
    assert y.dtype == torch.bfloat16
    kept = y != 0
    torch.testing.assert_close(y[kept], (x[kept].float() * (1 / 0.9)).bfloat16(), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["eval", "p0", "p1", "inplace"])
def test_falls_back_to_nn_dropout_where_there_is_nothing_to_gain(case):
    x = torch.randn(16, 32)
    p = {"p0": 0.0, "p1": 1.0}.get(case, 0.1)
    ours, ref = Dropout(p, inplace=case == "inplace"), nn.Dropout(p, inplace=case == "inplace")
    if case == "eval":
        ours.eval(), ref.eval()
    torch.manual_seed(4)
    a = ours(x.clone())
    torch.manual_seed(4)
    b = ref(x.clone())
    assert torch.equal(a, b)


def test_is_an_nn_dropout_with_no_state():
    d = Dropout(0.1)
    assert isinstance(d, nn.Dropout) and d.p == 0.1
    assert d.state_dict() == {} and list(d.parameters()) == []


def test_a_layer_trains_like_one_with_torch_dropout():
    """The joint: an encoder layer with our dropout, trained by Adam, against the same layer whose dropouts
    are torch's F.dropout: both fit the same target equally well (to the noise of the masks)."""
    def fit(torch_dropout: bool) -> tuple[float, float]:
        torch.manual_seed(5)
        layer = encoder_layer(32, 4, 64, dropout=0.1)
        drops = [m for m in layer.modules() if isinstance(m, Dropout)]
        assert len(drops) == 2
        if torch_dropout:
            for m in drops:
                m.forward = lambda x, m=m: F.dropout(x, m.p, m.training)
        opt = torch.optim.Adam(layer.parameters(), lr=3e-3)
        x, target = torch.randn(16, 10, 32), torch.randn(16, 10, 32)
        losses = []
        for step in range(151):
            if step in (0, 150):
                with torch.no_grad():
                    losses.append(F.mse_loss(layer.eval()(x)[0], target).item())
                layer.train()
            opt.zero_grad()
            F.mse_loss(layer(x)[0], target).backward()
            opt.step()
        return losses[0], losses[1]

    (start, ours), (start_ref, ref) = fit(False), fit(True)
    assert start == start_ref  # the same layer before training
    assert ours < 0.7 * start and ref < 0.7 * start
    assert abs(ours - ref) / ref < 0.15
