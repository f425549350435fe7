"""embeddings.py: section 3.4 (scaled embeddings) and 3.5 (positional encoding), against the paper."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer_min.model import reference
from transformer_min.model.embeddings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from transformer_min.model.variants import POSITIONAL_VARIANTS
from transformer_min.core.errors import ModelInputError

# PAPER.md test vectors at d_model = 512 (float64): (pos, dim, value)
PAPER_PE = [
    (0, 0, 0.0), (0, 1, 1.0),
    (1, 0, 0.8414709848078965), (1, 1, 0.5403023058681398),
    (1, 2, 0.8218561900175316), (1, 3, 0.5696950086931313),
    (1, 256, 0.009999833334166664), (2, 1, -0.4161468365471424),
    (10, 100, 0.9964723308680214), (10, 101, -0.08392195073073737),
    (100, 256, 0.8414709848078965), (100, 257, 0.5403023058681398),
    (1000, 510, 0.1034777302653366), (1000, 511, 0.9946317707268023),
]


def max_error_vs_paper(table: torch.Tensor) -> float:
    return max(abs(table[pos, dim].item() - want) for pos, dim, want in PAPER_PE)


def doubled_exponent_pe(max_len: int, d_model: int) -> torch.Tensor:
    """The common bug: i already steps 0, 2, 4, ... and the exponent doubles it again: 10000^(2*i/d)."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    for i in range(0, d_model, 2):
        angle = pos[:, 0] / 10000 ** (2 * i / d_model)
        pe[:, i] = torch.sin(angle)
        pe[:, i + 1] = torch.cos(angle)
    return pe


def concatenated_pe(max_len: int, d_model: int) -> torch.Tensor:
    """Another common variant: [sin | cos] halves instead of interleaved dimensions."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


@pytest.fixture(scope="module")
def paper_table() -> torch.Tensor:
    return sinusoidal_table(1001, 512, dtype=torch.float64)


def test_pe_matches_paper_test_vectors(paper_table):
    assert paper_table.shape == (1001, 512) and paper_table.dtype == torch.float64
    assert max_error_vs_paper(paper_table) < 1e-12


def test_doubled_exponent_bug_would_be_caught(paper_table):
    """The paper-vector test above fails on the doubled-exponent PE, so it would catch that bug."""
    buggy = doubled_exponent_pe(1001, 512)
    assert max_error_vs_paper(buggy) > 0.1  # e.g. PE(1, 2) = sin(1 / 10000^(4/512)) != 0.82185...
    assert abs(buggy[1, 2].item() - 0.8218561900175316) > 0.01
    assert max_error_vs_paper(paper_table) < 1e-12  # ours is not that bug
    assert not torch.allclose(buggy[:64], paper_table[:64])


@pytest.mark.parametrize("max_len,d_model", [(40, 512), (30, 16), (25, 33)], ids=["512", "16", "odd-33"])
def test_pe_matches_numpy_transcription(max_len, d_model):
    ours = sinusoidal_table(max_len, d_model, dtype=torch.float64).numpy()
    np.testing.assert_allclose(ours, reference.positional_encoding(max_len, d_model), atol=1e-12, rtol=0)


def test_pe_interleaves_sin_and_cos():
    d = 64
    pe = sinusoidal_table(50, d, dtype=torch.float64)
    pos = torch.arange(50, dtype=torch.float64)[:, None]
    for two_i in range(0, d, 2):  # PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos of the same angle
        angle = pos[:, 0] / 10000 ** (two_i / d)
        torch.testing.assert_close(pe[:, two_i], torch.sin(angle), atol=1e-12, rtol=0)
        torch.testing.assert_close(pe[:, two_i + 1], torch.cos(angle), atol=1e-12, rtol=0)
    # each (2i, 2i+1) pair is a point on the unit circle; a [sin | cos] layout breaks this
    assert torch.allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(50, d // 2, dtype=torch.float64), atol=1e-12)
    concat = concatenated_pe(50, d)
    assert not torch.allclose(concat[:, 0::2] ** 2 + concat[:, 1::2] ** 2, torch.ones(50, d // 2, dtype=torch.float64), atol=1e-3)


def test_pe_float32_error_within_paper_bound():
    pe32 = sinusoidal_table(2048, 512)  # default dtype float32
    assert pe32.dtype == torch.float32
    pe64 = sinusoidal_table(2048, 512, dtype=torch.float64)
    assert (pe32.double() - pe64).abs().max().item() < 1.2e-4  # PAPER.md float32 bound for pos <= 2047


def test_token_embedding_scaled_by_sqrt_d_model():
    assert math.sqrt(512) == pytest.approx(22.62741699796952, abs=1e-14)  # PAPER.md's printed value
    torch.manual_seed(0)
    emb = TokenEmbedding(20, 512)
    tokens = torch.tensor([[0, 5, 19], [3, 3, 7]])
    want = F.embedding(tokens, emb.weight) * 22.62741699796952  # section 3.4
    torch.testing.assert_close(emb(tokens), want, atol=0, rtol=1e-7)
    assert not torch.allclose(emb(tokens), F.embedding(tokens, emb.weight))  # the scale is really there
    assert emb(tokens).shape == (2, 3, 512)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned", "rope"])
def test_positional_encoding_raises_past_max_len(kind):
    pe = POSITIONAL_VARIANTS[kind].encoding(16, max_len=8)
    pe(torch.zeros(2, 8, 16))  # exactly max_len is fine
    with pytest.raises(ModelInputError, match="model.max_len") as err:
        pe(torch.zeros(2, 9, 16))
    assert "9" in str(err.value) and "8" in str(err.value)
    with pytest.raises(ModelInputError, match="model.max_len"):
        pe(torch.zeros(1, 3, 16), offset=6)  # positions 6..8: one past the end


def test_sinusoidal_encoding_adds_the_table_at_an_offset():
    pe = SinusoidalPositionalEncoding(16, max_len=20).eval()
    x = torch.randn(2, 5, 16)
    want = torch.from_numpy(reference.positional_encoding(20, 16)[3:8]).float()
    torch.testing.assert_close(pe(x, offset=3), x + want, atol=1e-6, rtol=0)
    assert sum(p.numel() for p in pe.parameters()) == 0  # fixed: no parameters
    assert "pe" not in pe.state_dict()  # a non-persistent buffer, rebuilt rather than saved


def test_learned_positional_encoding_parameters():
    pe = LearnedPositionalEncoding(16, max_len=12)
    assert sum(p.numel() for p in pe.parameters()) == 12 * 16
    x = torch.randn(2, 4, 16)
    torch.testing.assert_close(pe.eval()(x, offset=2), x + pe.weight[2:6], atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned", "relative"])
def test_dropout_on_the_sum_in_train_identity_in_eval(kind):
    torch.manual_seed(0)
    p = 0.5
    pe = POSITIONAL_VARIANTS[kind].encoding(16, max_len=32, dropout=p)
    x = torch.randn(4, 10, 16)
    with torch.no_grad():
        clean = pe.eval()(x)
        total = x + pe.positions(10, 0)
        torch.testing.assert_close(clean, total, atol=0, rtol=0)  # eval: identity dropout
        noisy = pe.train()(x)
    dropped = noisy == 0
    assert 0.3 < dropped.float().mean().item() < 0.7
    # section 5.4: dropout is applied to the sum, so a kept element is (x + PE) / (1 - p) and a dropped
    # one is 0 (dropout on x alone would leave PE behind in the dropped elements)
    torch.testing.assert_close(noisy[~dropped], total[~dropped] / (1 - p))
    assert (total[dropped].abs() > 0).all()
