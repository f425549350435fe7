"""verify/measures.py: attention entropy per head, against hand-worked values and NumPy."""

from __future__ import annotations

import math

import numpy as np
import torch

from transformer_min.verify.measures import attention_entropy


def test_uniform_rows_give_ln_keys_and_one_hot_rows_give_zero():
    L = 6
    uniform = torch.full((1, 1, L, L), 1 / L)
    one_hot = torch.eye(L)[None, None]
    got = attention_entropy(torch.cat([uniform, one_hot], dim=1))  # (1, 2)
    assert got.shape == (1, 2)
    assert math.isclose(got[0, 0].item(), math.log(L), rel_tol=1e-6) and abs(got[0, 1].item()) < 1e-6


def test_matches_numpy_mean_row_entropy():
    g = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64), dim=-1)  # (B, H, Lq, Lk)
    p = w.numpy()
    want = (-(p * np.log(p)).sum(-1)).mean(-1)  # (B, H)
    np.testing.assert_allclose(attention_entropy(w).numpy(), want, rtol=1e-12)
