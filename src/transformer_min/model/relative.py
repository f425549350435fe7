"""Relative position representations (Shaw, Uszkoreit and Vaswani, 2018) in self-attention; selected
by model.positional = "relative" with the clipping distance k = model.relative_clip (no absolute
encoding is added to the embeddings).

Deviation: not in the paper (section 3.5 adds sinusoids to the embeddings).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.config import ModelConfig
from transformer_min.model.attention import MultiHeadAttention, masked_softmax


def relative_buckets(q_len: int, k_len: int, clip: int, offset: int = 0,
                     device: torch.device | None = None) -> Tensor:
    """Shaw et al. eq. (5): clip(j - i, k) + k for queries i = offset .. offset + q_len - 1 and keys
    j = 0 .. k_len - 1, an index into the 2k + 1 learned vectors. -> (q_len, k_len) long."""
    i = torch.arange(offset, offset + q_len, device=device)[:, None]  # (T, 1)
    j = torch.arange(k_len, device=device)[None, :]  # (1, S)
    return (j - i).clamp(-clip, clip) + clip  # (T, S) in [0, 2k]


class RelativeAttention(MultiHeadAttention):
    """Multi-head self-attention with relative position representations on keys and values.

    Shaw et al. eq. (3)-(4), per head:
        e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z),   z_i = sum_j alpha_ij (x_j W^V + a^V_ij),
    a^K_ij = w^K_clip(j-i, k), a^V_ij = w^V_clip(j-i, k): two learned tables of 2k + 1 vectors
    (size d_k and d_v), shared across heads. Computed without the (T, S, d) tensor of a_ij: the
    key term is q_i . w^K_r for every r, gathered at r = clip(j - i) + k; the value term sums the
    weights alpha_ij into their buckets r, then multiplies by w^V.

    Gap the paper leaves: initialisation of the tables; we use N(0, d^-1/2). Always the written-out
    path (the fused kernel has no place for the value term), whatever `kernel` says.
    """

    config_fields = ("relative_clip",)

    def __init__(self, d_model: int, num_heads: int, d_k: int | None = None, d_v: int | None = None,
                 dropout: float = 0.0, bias: bool = True, kernel: str = "fused", relative_clip: int = 16):
        super().__init__(d_model, num_heads, d_k, d_v, dropout, bias, kernel)
        self.relative_clip = relative_clip
        self.rel_k = nn.Parameter(torch.randn(2 * relative_clip + 1, self.d_k) * self.d_k ** -0.5)  # w^K
        self.rel_v = nn.Parameter(torch.randn(2 * relative_clip + 1, self.d_v) * self.d_v ** -0.5)  # w^V

    @classmethod
    def count_values(cls, m: ModelConfig) -> int:
        """MultiHeadAttention's parameters plus the two tables, (2k + 1)(d_k + d_v)."""
        return super().count_values(m) + (2 * m.relative_clip + 1) * (m.head_dim_k + m.head_dim_v)

    def scores(self, q: Tensor, k: Tensor, offset: int = 0) -> Tensor:
        """Eq. (4) before the softmax: e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_z), q (B, H, T, d_k) at positions
        offset.., k (B, H, S, d_k) at 0.. -> (B, H, T, S)."""
        B, H, T, _ = q.shape
        idx = relative_buckets(T, k.size(2), self.relative_clip, offset, q.device).expand(B, H, T, -1)
        rel_scores = q @ self.rel_k.transpose(0, 1)  # (B, H, T, 2k+1): q_i . w^K_r for every r
        return (q @ k.transpose(-2, -1) + rel_scores.gather(-1, idx)) / math.sqrt(self.d_k)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool,
               offset: int) -> tuple[Tensor, Tensor | None]:
        """q (B, H, T, d_k) at positions offset.., k (B, H, S, d_k), v (B, H, S, d_v) at 0..
        -> z (B, H, T, d_v), weights alpha (B, H, T, S) or None."""
        B, H, T, _ = q.shape
        S = k.size(2)
        weights = masked_softmax(self.scores(q, k, offset), mask, q.dtype)  # alpha, (B, H, T, S)
        p = self.dropout if self.training else 0.0
        attn = F.dropout(weights, p=p) if p > 0.0 else weights
        idx = relative_buckets(T, S, self.relative_clip, offset, q.device).expand(B, H, T, S)
        buckets = attn.new_zeros(B, H, T, 2 * self.relative_clip + 1).scatter_add_(-1, idx, attn)  # sum_j per r
        out = attn @ v + buckets @ self.rel_v.to(attn.dtype)  # eq. (3): (B, H, T, d_v)
        return out, weights if need_weights else None
