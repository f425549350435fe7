"""Rotary position embedding (Su et al., 2021, RoFormer, section 3.4.2, eq. (34)) on Q and K of
self-attention; selected by model.positional = "rope" (no absolute encoding is added to the embeddings).

Deviation: not in the paper (section 3.5 adds sinusoids to the embeddings).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.model.attention import MultiHeadAttention

ROPE_BASE = 10000.0  # RoFormer's theta_i = 10000^(-2i/d)


def rotary_angles(offset: int, length: int, d_k: int, device: torch.device | None = None) -> Tensor:
    """Angles pos * 10000^(-2i/d_k) for pos = offset .. offset + length - 1, i = 0 .. d_k/2 - 1.

    In float64 (cos and sin of large angles keep their digits; `rotate_pairs` casts after them).
    -> (length, d_k / 2).
    """
    pos = torch.arange(offset, offset + length, dtype=torch.float64, device=device)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_k, 2, dtype=torch.float64, device=device)  # (d_k/2,) = 0, 2, 4, ...
    return pos * ROPE_BASE ** (-two_i / d_k)  # (L, d_k/2)


def rotate_pairs(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate the pairs (x_{2i}, x_{2i+1}) of x (..., L, d) by angles (L, d/2), RoFormer eq. (34):

    (x_{2i}, x_{2i+1}) -> (x_{2i} cos - x_{2i+1} sin, x_{2i} sin + x_{2i+1} cos).
    Runs in at least fp32 and returns x's dtype.
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)  # (L, d/2)
    even, odd = x[..., 0::2].to(dtype), x[..., 1::2].to(dtype)  # (..., L, d/2)
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., L, d/2, 2)
    return out.flatten(-2).to(x.dtype)  # (..., L, d), pairs back in place


class RotaryAttention(MultiHeadAttention):
    """Multi-head self-attention whose queries and keys are rotated by their positions (RoPE).

    q_m^T k_n after the rotation depends on the positions m, n only through m - n (RoFormer eq. (16)),
    so the scores carry relative positions and the embeddings none. No parameters beyond
    MultiHeadAttention's. With a KV cache the keys are rotated before they are stored, and a step's
    queries and keys start at the cache length.
    """

    def encode_positions(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """q (B, H, T, d_k), k (B, H, S, d_k), both starting at position `offset` -> rotated q, k."""
        q_angles = rotary_angles(offset, q.size(2), self.d_k, q.device)  # (T, d_k/2)
        k_angles = q_angles if k.size(2) == q.size(2) else rotary_angles(offset, k.size(2), self.d_k, k.device)
        return rotate_pairs(q, q_angles), rotate_pairs(k, k_angles)
