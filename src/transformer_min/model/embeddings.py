"""Embeddings (section 3.4) and positional encodings (section 3.5)."""

from __future__ import annotations

import abc
import math

import torch
from torch import Tensor, nn

from transformer_min.core.errors import ModelInputError
from transformer_min.core.i18n import tr
from transformer_min.model.dropout import Dropout


class TokenEmbedding(nn.Module):
    """Learned embeddings scaled by sqrt(d_model), section 3.4.

    "In the embedding layers, we multiply those weights by sqrt(d_model)." The same weight
    matrix may be shared with the other embedding and the pre-softmax projection (three-way tying);
    the pre-softmax projection is not scaled.

    Gap the paper leaves: initialisation. We use N(0, d_model^-0.5), so that the scaled embedding
    has unit-variance components and tied output logits start near unit scale.
    """

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=d_model ** -0.5)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, L) int -> (B, L, D)."""
        return nn.functional.embedding(tokens, self.weight) * math.sqrt(self.d_model)  # 3.4


def sinusoidal_table(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same). -> (L, D).

    Interleaved: even dimensions hold sin, odd dimensions cos. `2i` is the even dimension index
    itself (0, 2, 4, ...), so the exponent is 2i/d_model, not 2*(2i)/d_model.
    Computed in float64, then cast.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),) = 0, 2, 4, ...
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (L, ceil(D/2))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


class PositionalBase(nn.Module, abc.ABC):
    """Adds positions to x (B, L, D) starting at `offset`, then dropout on the sum (section 5.4)."""

    def __init__(self, d_model: int, max_len: int, dropout: float):
        super().__init__()
        self.max_len = max_len
        self.dropout = Dropout(dropout)

    @abc.abstractmethod
    def positions(self, length: int, offset: int) -> Tensor:
        """The (length, D) position vectors for positions offset .. offset + length - 1."""

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (B, L, D) -> (B, L, D): Dropout(x + PE[offset : offset + L])."""
        length = x.size(1)
        if offset + length > self.max_len:
            raise ModelInputError(
                tr("sequence length {offset} exceeds model.max_len {max_len}; raise model.max_len in config.toml or shorten the input").format(offset=offset + length, max_len=self.max_len)
            )
        return self.dropout(x + self.positions(length, offset).to(x.dtype))

    @classmethod
    def count_values(cls, max_len: int, d_model: int) -> int:
        """Parameters plus buffers of one such module, in closed form: a (max_len, D) table."""
        return max_len * d_model


class SinusoidalPositionalEncoding(PositionalBase):
    """Fixed sinusoidal positional encoding, section 3.5 (the paper's choice; no parameters)."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__(d_model, max_len, dropout)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)  # (L, D)

    def positions(self, length: int, offset: int) -> Tensor:
        return self.pe[offset : offset + length]  # (L, D), broadcasts over B


class LearnedPositionalEncoding(PositionalBase):
    """Learned positional embeddings, Table 3 row E.

    Deviation: the paper's base model uses sinusoids; select with model.positional = "learned".
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__(d_model, max_len, dropout)
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=d_model ** -0.5)

    def positions(self, length: int, offset: int) -> Tensor:
        return self.weight[offset : offset + length]  # (L, D)


class NoPositionalEncoding(PositionalBase):
    """No absolute positions: the embeddings pass with dropout only (section 5.4), and lengths are still
    held to model.max_len. Used where attention carries the positions (model.positional = "rope",
    "relative"; see model/variants.py)."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__(d_model, max_len, dropout)
        self.d_model = d_model

    def positions(self, length: int, offset: int) -> Tensor:
        return torch.zeros(())  # broadcasts over (B, L, D): adds nothing

    @classmethod
    def count_values(cls, max_len: int, d_model: int) -> int:
        return 0

