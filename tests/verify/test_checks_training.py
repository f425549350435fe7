"""verify/checks/training.py: eq. (3) test vectors, Adam, label smoothing; broken versions fail."""

from __future__ import annotations

import torch

from transformer_min.verify.checks import training as checks
from tests.verify.helpers import run





def test_test_vectors_are_the_papers():
    assert checks.LR_TEST_VECTORS[2] == (4000, 6.987712429686843e-04)
    assert checks.BIG_PEAK == 4.941058844013092e-04


def test_schedule_with_the_wrong_warmup_power_fails(monkeypatch):
    def wrong(step, d_model, warmup_steps=4000, factor=1.0):
        return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.0)

    monkeypatch.setattr("transformer_min.training.schedule.rate", wrong)
    assert not run("training.lr_test_vectors").passed
    assert not run("training.lr_peak_at_warmup").passed


def test_scheduler_off_by_one_fails(monkeypatch):
    from transformer_min.training import schedule

    def zero_based(optimizer, d_model, warmup_steps, factor=1.0):
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = 1.0
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: schedule.rate(s + 2, d_model, warmup_steps))

    monkeypatch.setattr(schedule, "noam_scheduler", zero_based)
    assert not run("training.noam_scheduler_matches_eq3").passed


def test_adam_with_pytorch_defaults_fails(monkeypatch):
    from transformer_min.training import optim

    def pytorch_defaults(model, betas, eps):
        return torch.optim.Adam(model.parameters(), lr=1.0)

    monkeypatch.setattr(optim, "build_optimizer", pytorch_defaults)
    o = run("training.adam_hyperparameters")
    assert not o.passed and "0.999" in o.result.measured


def test_eps_over_v_smoothing_fails(monkeypatch):
    """Smoothing spread as eps/V over all classes (pad included) is a different distribution."""
    from transformer_min.training import loss

    def eps_over_v(target, vocab_size, eps, pad_id):
        q = torch.full((*target.shape, vocab_size), eps / vocab_size)
        q.scatter_(-1, target.unsqueeze(-1), 1.0 - eps + eps / vocab_size)
        return q

    monkeypatch.setattr(loss, "smoothed_target", eps_over_v)
    assert not run("training.label_smoothing_distribution").passed
    assert not run("training.label_smoothing_loss").passed  # the loss no longer matches its own q
