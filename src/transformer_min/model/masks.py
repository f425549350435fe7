"""Masks as pure functions, sections 3.1 and 3.2.3.

One convention everywhere: boolean, True = may attend (the same as
`torch.nn.functional.scaled_dot_product_attention`). Note that `torch.nn.MultiheadAttention`
uses the opposite meaning (True = masked out) for its boolean masks.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Key padding mask: tokens (B, S) -> (B, 1, 1, S), True where the key is a real token."""
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Section 3.2.3: position i may attend to positions <= i (diagonal included). -> (T, T).

    "We need to prevent leftward information flow in the decoder to preserve the
    auto-regressive property." Lower-triangular, True on and below the diagonal.
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()  # (T, T)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of broadcastable masks (None entries are skipped); None if all are None.

    Example: decoder self-attention = padding_mask(tgt) (B, 1, 1, T) & causal_mask(T) (T, T)
    -> (B, 1, T, T).
    """
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def target_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Decoder self-attention mask: padding & causal -> (B, 1, T, T)."""
    return combine_masks(padding_mask(tokens, pad_id), causal_mask(tokens.size(1), tokens.device))
