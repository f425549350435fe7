"""verify/checks/arithmetic.py: the paper's training times and costs agree with each other."""

from __future__ import annotations


from transformer_min.verify.checks import arithmetic
from tests.verify.helpers import BY_ID
from transformer_min.verify.registry import Context, run_check




def test_cost_depends_on_the_gpu_throughput(monkeypatch):
    monkeypatch.setattr(arithmetic, "P100_FLOPS", 10.6e12)  # a different (the boost) figure breaks 3.3e18
    assert not run_check(BY_ID["arithmetic.training_cost_flops"], Context()).passed


def test_significant_figures():
    assert arithmetic._sig(3.2832e18) == 3.3e18 and arithmetic._sig(2.29824e19) == 2.3e19
