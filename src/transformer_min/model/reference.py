"""A NumPy reference of the core formulas, independent of torch, for cross-checks.

Each function is the paper's formula written as directly as NumPy allows (float64).
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax(x)_i = exp(x_i) / sum_j exp(x_j), stabilised by subtracting the max."""
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
              mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (1): softmax(Q K^T / sqrt(d_k)) V. q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v).

    mask: boolean, True = may attend; masked logits are -inf (section 3.2.3). Rows with no
    allowed key are returned as zeros (the convention of the torch code).
    """
    d_k = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)
        empty = ~mask.any(axis=-1, keepdims=True)
        scores = np.where(empty, 0.0, scores)
        weights = np.where(empty, 0.0, softmax(scores))
    else:
        weights = softmax(scores)
    return weights @ v, weights


def multi_head_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                         w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray, w_o: np.ndarray,
                         b_q=None, b_k=None, b_v=None, b_o=None, num_heads: int = 8,
                         mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Section 3.2.2, head by head: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V);
    MultiHead = Concat(head_1..head_h) W^O.

    Weights use the x @ W convention: w_q (d_model, h d_k), w_o (h d_v, d_model).
    query (B, T, D), key/value (B, S, D). Returns (B, T, D) and per-head weights (B, H, T, S).
    """
    def lin(x, w, b):
        return x @ w + (0.0 if b is None else b)

    Q, K, V = lin(query, w_q, b_q), lin(key, w_k, b_k), lin(value, w_v, b_v)
    d_k, d_v = Q.shape[-1] // num_heads, V.shape[-1] // num_heads
    heads, weights = [], []
    for i in range(num_heads):  # written as a loop over heads, as the paper states it
        q_i = Q[..., i * d_k:(i + 1) * d_k]
        k_i = K[..., i * d_k:(i + 1) * d_k]
        v_i = V[..., i * d_v:(i + 1) * d_v]
        m_i = None if mask is None else (mask[:, i] if mask.ndim == 4 and mask.shape[1] == num_heads
                                         else (mask[:, 0] if mask.ndim == 4 else mask))
        h_i, w_i = attention(q_i, k_i, v_i, m_i)
        heads.append(h_i)
        weights.append(w_i)
    concat = np.concatenate(heads, axis=-1)  # (B, T, h d_v)
    return lin(concat, w_o, b_o), np.stack(weights, axis=1)


def positional_encoding(max_len: int, d_model: int) -> np.ndarray:
    """Section 3.5, element by element: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)). Returns (max_len, d_model) float64."""
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for two_i in range(0, d_model, 2):
            angle = pos / 10000 ** (two_i / d_model)
            pe[pos, two_i] = np.sin(angle)
            if two_i + 1 < d_model:
                pe[pos, two_i + 1] = np.cos(angle)
    return pe


def position_wise_ffn(x: np.ndarray, w_1: np.ndarray, b_1: np.ndarray,
                      w_2: np.ndarray, b_2: np.ndarray) -> np.ndarray:
    """Eq. (2): FFN(x) = max(0, x W1 + b1) W2 + b2 (x @ W convention)."""
    return np.maximum(0.0, x @ w_1 + b_1) @ w_2 + b_2


def rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Eq. (3): lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)."""
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def rotary(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """RoFormer (Su et al., 2021) eq. (34), element by element: each pair (x_{2i}, x_{2i+1}) of row m is
    rotated by the angle m * 10000^(-2i/d). x (L, d) with d even, positions (L,). Returns (L, d) float64."""
    out = np.empty(x.shape)
    d = x.shape[-1]
    for row, pos in enumerate(positions):
        for two_i in range(0, d, 2):
            theta = pos * 10000.0 ** (-two_i / d)
            c, s = np.cos(theta), np.sin(theta)
            out[row, two_i] = x[row, two_i] * c - x[row, two_i + 1] * s
            out[row, two_i + 1] = x[row, two_i] * s + x[row, two_i + 1] * c
    return out


def relative_attention(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray, w_o: np.ndarray,
                       a_k: np.ndarray, a_v: np.ndarray, num_heads: int, clip: int,
                       mask: np.ndarray | None = None) -> np.ndarray:
    """Shaw et al. (2018) eq. (3)-(4) with loops, head by head (x @ W convention, no biases):
    e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z), alpha = softmax_j(e), z_i = sum_j alpha_ij (x_j W^V + a^V_ij),
    a_ij = w_clip(j - i, k) (eq. (5)): rows clip(j - i, -k, k) + k of a_k (2k+1, d_k) and a_v (2k+1, d_v).
    Then Concat(heads) W^O. x (L, D), mask (L, L) boolean (True = may attend). Returns (L, D)."""
    L = x.shape[0]
    d_k, d_v = w_q.shape[1] // num_heads, w_v.shape[1] // num_heads
    Q, K, V = x @ w_q, x @ w_k, x @ w_v
    z = np.zeros((L, num_heads * d_v))
    for h in range(num_heads):
        qh, kh = Q[:, h * d_k:(h + 1) * d_k], K[:, h * d_k:(h + 1) * d_k]
        vh = V[:, h * d_v:(h + 1) * d_v]
        for i in range(L):
            r = [max(-clip, min(clip, j - i)) + clip for j in range(L)]
            e = np.array([qh[i] @ (kh[j] + a_k[r[j]]) / np.sqrt(d_k) for j in range(L)])
            if mask is not None:
                e = np.where(mask[i], e, -np.inf)
            alpha = softmax(e)
            z[i, h * d_v:(h + 1) * d_v] = sum(alpha[j] * (vh[j] + a_v[r[j]]) for j in range(L))
    return z @ w_o
