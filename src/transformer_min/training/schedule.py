"""The learning-rate schedule of section 5.3, eq. (3)."""

from __future__ import annotations

import torch
from transformer_min.core.i18n import tr


def rate(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    """Eq. (3): lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step; the
    peak is at step = warmup_steps. Undefined at step 0, so steps count from 1. `factor` (default 1,
    the paper) scales the whole curve (deviation when != 1).
    """
    if step < 1:
        raise ValueError(tr("eq. (3) is defined for step >= 1, got {step}").format(step=step))
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def noam_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int,
                   factor: float = 1.0) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR that sets the optimizer's lr to eq. (3) of the 1-based optimizer step.

    The optimizer's base lr must be 1.0. Call `scheduler.step()` once per optimizer step.
    """
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: rate(s + 1, d_model, warmup_steps, factor))
