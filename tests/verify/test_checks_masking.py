"""verify/checks/masking.py: the causal mask is lower-triangular with the diagonal; broken masks fail."""

from __future__ import annotations

import pytest
import torch

from tests.verify.helpers import run





@pytest.mark.parametrize("diagonal", [1, -1], ids=["sees-next-token", "misses-itself"])
def test_shifted_causal_mask_fails(monkeypatch, diagonal):
    def shifted(size, device=None):
        return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal)

    monkeypatch.setattr("transformer_min.model.masks.causal_mask", shifted)
    assert not run("masking.causal_mask_lower_triangular").passed
    assert not run("masking.target_mask_padding_and_causal").passed
    assert not run("masking.model_decoder_weights_causal").passed  # above-diagonal weight, or an empty diagonal


def test_target_mask_without_padding_fails(monkeypatch):
    from transformer_min.model import masks

    monkeypatch.setattr(masks, "target_mask", lambda tokens, pad_id: masks.causal_mask(tokens.size(1))[None, None]
                        .expand(tokens.size(0), 1, -1, -1))
    assert not run("masking.target_mask_padding_and_causal").passed


def test_lines_show_the_mask():
    lines = run("masking.causal_mask_lower_triangular").result.lines
    assert lines[1].strip() == "1 0 0 0 0" and lines[5].strip() == "1 1 1 1 1"
