"""Label-smoothed cross entropy, section 5.4 (eps_ls = 0.1), as a pure function."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor, int]:
    """Summed label-smoothed loss, summed NLL, and the number of target tokens.

    The paper fixes eps_ls = 0.1 but not the distribution; ours: the target distribution is
    q = (1 - eps) * onehot(y) + eps / (V - 1) on every class except pad (the true class included),
    and pad gets 0. loss_t = -sum_c q_c log p_c. Positions whose target is pad count for nothing,
    neither in the loss nor in the token count.

    logits (B, T, V), target (B, T) -> (loss_sum, nll_sum, n_tokens).
    """
    V = logits.size(-1)
    # (B, T, V) in at least fp32 (also under autocast; float64 stays float64)
    logp = F.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    keep = target != pad_id  # (B, T)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth = -(logp.sum(-1) - logp[..., pad_id]) / (V - 1)  # (B, T): uniform over non-pad classes
    loss = (1.0 - eps) * nll + eps * smooth
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return (torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum(), int(keep.sum()))


def smoothed_target(target: Tensor, vocab_size: int, eps: float, pad_id: int) -> Tensor:
    """The distribution q that `label_smoothed_nll` trains towards, (..., V) (for plots and tests)."""
    q = torch.full((*target.shape, vocab_size), eps / (vocab_size - 1))
    q[..., pad_id] = 0.0
    q.scatter_(-1, target.unsqueeze(-1), 1.0 - eps + eps / (vocab_size - 1))
    return q
