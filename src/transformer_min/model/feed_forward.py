"""Position-wise feed-forward network, section 3.3, eq. (2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer_min.model.dropout import Dropout
from transformer_min.model.inference import FeedForwardWeights, Packed


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, section 3.3, eq. (2).

    Applied to each position separately and identically ("two convolutions with kernel size 1"),
    d_model -> d_ff -> d_model (512 -> 2048 -> 512 in the base model).

    Deviation: `dropout` is ReLU dropout (on the hidden activation), which is not in the paper;
    the default 0 keeps the paper.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, L, D) -> (B, L, D): every position is one row of the same two GEMMs."""
        rows = x.reshape(-1, x.size(-1))  # (B*L, D)
        # relu_ in place of W1's fresh 2-D output (its backward needs only the result): the same values, one
        # (B*L, d_ff) buffer and pass fewer. On a 3-D input, nn.Linear returns a view of its 2-D product, and
        # an in-place op on a view costs autograd four (B, L, d_ff) copies in backward (CopySlices).
        h = torch.relu_(self.w_1(rows))  # (B*L, d_ff)
        return self.w_2(self.dropout(h)).view(x.shape)  # (B*L, D) -> (B, L, D)

    def step_weights(self, transposed: bool) -> FeedForwardWeights:
        """A copy of W_1, W_2 and their biases for `step`, in the layout `transposed` (model/inference.py)."""
        return FeedForwardWeights(Packed(transposed, self.w_1), Packed(transposed, self.w_2))

    @staticmethod
    def step(x: Tensor, w: FeedForwardWeights, residual: Tensor) -> Tensor:
        """residual + eq. (2) on one position per row, inference (no dropout): x, residual (N, D) -> (N, D). The
        max(0, .) and the residual sum each product does its own way (`Packed.relu`, `Packed.add`; int8's in one
        operator and in place): the same values."""
        return w.w_2.add(w.w_1.relu(x), residual)  # (N, d_ff) -> (N, D)
