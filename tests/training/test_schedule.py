"""Eq. (3) against the formula computed by hand and PAPER.md's test vectors."""

import math

import pytest
import torch

from transformer_min.training.schedule import noam_scheduler, rate

# PAPER.md, d_model 512, warmup 4000
PAPER = {1: 1.746928107421711e-07, 100: 1.746928107421711e-05, 4000: 6.987712429686843e-04,
         10000: 4.4194173824159226e-04, 100000: 1.3975424859373687e-04}


@pytest.mark.parametrize("step", [1, 100, 4000, 10000])
def test_rate_matches_eq3_by_hand(step):
    by_hand = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
    assert rate(step, 512, 4000) == pytest.approx(by_hand, rel=1e-12)
    assert rate(step, 512, 4000) == pytest.approx(PAPER[step], rel=1e-12)


def test_peak_at_warmup_and_big_model_peak():
    values = [rate(s, 512, 4000) for s in range(3990, 4011)]
    assert max(values) == rate(4000, 512, 4000)
    assert rate(4000, 1024, 4000) == pytest.approx(4.941058844013092e-04, rel=1e-12)


def test_factor_scales_and_step_zero_is_rejected():
    assert rate(50, 256, 400, factor=2.0) == pytest.approx(2 * rate(50, 256, 400))
    with pytest.raises(ValueError, match="step >= 1"):
        rate(0, 512, 4000)


def test_scheduler_sets_lr_of_each_optimizer_step():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=123.0)
    sched = noam_scheduler(opt, 512, 4000)
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([512 ** -0.5 * s * 4000 ** -1.5 for s in range(1, 6)], rel=1e-12)
    assert math.isclose(seen[0], PAPER[1], rel_tol=1e-12)
