"""masks.py: boolean masks, True = may attend (sections 3.1, 3.2.3), against naive loops."""

from __future__ import annotations

import pytest
import torch

from transformer_min.model.masks import causal_mask, combine_masks, padding_mask, target_mask


def naive_causal(T: int) -> torch.Tensor:
    """Section 3.2.3 as a loop: query i may see key j iff j <= i."""
    m = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(T):
            m[i, j] = j <= i
    return m


@pytest.mark.parametrize("pad_id", [0, 3])
def test_padding_mask_shape_and_values(pad_id):
    tokens = torch.tensor([[5, 6, pad_id, pad_id], [7, pad_id, 8, 9], [pad_id] * 4])
    m = padding_mask(tokens, pad_id)
    assert m.shape == (3, 1, 1, 4)
    assert m.dtype == torch.bool
    for b in range(3):
        for s in range(4):
            assert bool(m[b, 0, 0, s]) == (int(tokens[b, s]) != pad_id)


@pytest.mark.parametrize("T", [1, 2, 5, 9])
def test_causal_mask_is_lower_triangular_with_diagonal(T):
    m = causal_mask(T)
    assert m.shape == (T, T)
    assert m.dtype == torch.bool
    assert torch.equal(m, naive_causal(T))
    assert bool(m.diagonal().all())  # i may attend to itself


def test_causal_mask_device_argument():
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_combine_masks_skips_none_and_ands_with_broadcast():
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    single = causal_mask(3)
    assert combine_masks(None, single) is single

    tokens = torch.tensor([[4, 5, 0], [4, 0, 0]])
    pad = padding_mask(tokens, 0)  # (B, 1, 1, T)
    causal = causal_mask(3)  # (T, T)
    both = combine_masks(pad, None, causal)
    assert both.shape == (2, 1, 3, 3)
    for b in range(2):
        for i in range(3):
            for j in range(3):
                assert bool(both[b, 0, i, j]) == (j <= i and int(tokens[b, j]) != 0)


def test_target_mask_is_padding_and_causal():
    tokens = torch.tensor([[4, 5, 6, 0], [4, 5, 0, 0]])
    m = target_mask(tokens, pad_id=0)
    assert m.shape == (2, 1, 4, 4)
    want = torch.zeros(2, 1, 4, 4, dtype=torch.bool)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                want[b, 0, i, j] = j <= i and int(tokens[b, j]) != 0
    assert torch.equal(m, want)
