"""Numbers measured on attention weights, shared by `tmin verify --llm` and the report's experiments."""

from __future__ import annotations

import torch


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of each head's attention rows: weights (..., H, Lq, Lk) -> (..., H).

    A row's entropy is -sum_j w_ij ln w_ij (0 ln 0 taken as 0); uniform attention over Lk keys gives ln Lk.
    """
    return -(weights.clamp_min(1e-12).log() * weights).sum(-1).mean(-1)  # (..., H)
