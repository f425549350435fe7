"""Label smoothing (section 5.4) against a value computed by hand."""

import math

import pytest
import torch

from transformer_min.training.loss import label_smoothed_nll, smoothed_target


def test_smoothed_loss_by_hand_tiny_example():
    # V = 4 (pad = 0), one real target token (class 2) and one pad position.
    logits = torch.tensor([[[0.5, 1.0, 2.0, -1.0], [3.0, 0.0, 0.0, 0.0]]])
    target = torch.tensor([[2, 0]])
    eps = 0.1
    z = [0.5, 1.0, 2.0, -1.0]
    lse = math.log(sum(math.exp(v) for v in z))
    logp = [v - lse for v in z]
    # q = (1 - eps) on class 2 + eps / (V - 1) on each non-pad class (1, 2, 3); pad gets 0
    q = [0.0, eps / 3, 1 - eps + eps / 3, eps / 3]
    want = -sum(qi * lp for qi, lp in zip(q, logp))
    loss, nll, n = label_smoothed_nll(logits, target, eps, pad_id=0)
    assert n == 1  # the pad position counts for nothing
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert nll.item() == pytest.approx(-logp[2], rel=1e-6)


def test_smoothed_target_is_a_distribution_with_zero_pad():
    q = smoothed_target(torch.tensor([3, 1]), vocab_size=5, eps=0.1, pad_id=0)
    assert torch.allclose(q.sum(-1), torch.ones(2))
    assert (q[:, 0] == 0).all()
    assert q[0, 3].item() == pytest.approx(0.9 + 0.1 / 4)


def test_loss_equals_cross_entropy_against_smoothed_target():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    target = torch.randint(1, 7, (2, 5))
    target[1, 3:] = 0
    loss, _, n = label_smoothed_nll(logits, target, 0.1, 0)
    q = smoothed_target(target, 7, 0.1, 0)
    per_tok = -(q * torch.log_softmax(logits, -1)).sum(-1)
    assert n == int((target != 0).sum())
    assert loss.item() == pytest.approx(per_tok[target != 0].sum().item(), rel=1e-5)


def test_no_smoothing_is_plain_cross_entropy():
    torch.manual_seed(1)
    logits, target = torch.randn(3, 4, 6), torch.randint(1, 6, (3, 4))
    loss, nll, _ = label_smoothed_nll(logits, target, 0.0, 0)
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 6), target.view(-1), reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5) and nll.item() == pytest.approx(ref.item(), rel=1e-5)
