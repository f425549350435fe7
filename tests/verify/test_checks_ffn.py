"""verify/checks/ffn.py: eq. (2), position-wise, two kernel-size-1 convolutions; broken FFNs fail."""

from __future__ import annotations

import torch

from transformer_min.model.feed_forward import PositionwiseFeedForward
from tests.verify.helpers import run





def test_mixing_positions_is_caught(monkeypatch):
    real = PositionwiseFeedForward.forward

    def leaky(self, x):  # adds the sequence mean: no longer position-wise
        return real(self, x) + x.mean(dim=1, keepdim=True)

    monkeypatch.setattr(PositionwiseFeedForward, "forward", leaky)
    assert not run("ffn.position_wise").passed
    assert not run("ffn.equation_2").passed
    assert not run("ffn.equals_two_conv1d").passed


def test_gelu_instead_of_relu_is_caught(monkeypatch):
    def gelu(self, x):
        return self.w_2(torch.nn.functional.gelu(self.w_1(x)))

    monkeypatch.setattr(PositionwiseFeedForward, "forward", gelu)
    assert not run("ffn.equation_2").passed
    assert run("ffn.position_wise").passed  # still position-wise: the checks are specific


def test_inner_dimension_reports_the_base_sizes():
    assert run("ffn.inner_dimension").result.measured == "512 -> 2048 -> 512 (output 512)"
