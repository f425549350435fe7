"""The scores of section 6.1's beam search: the length penalty and the bound that ends a sentence's search."""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.decoding.top_k import top_k


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty (Wu et al., 2016), used by section 6.1: lp(Y) = ((5 + |Y|) / 6) ** alpha.

    The hypothesis score is log P(Y | X) / lp(Y). |Y| counts the generated tokens, EOS included.
    """
    return ((5 + length) / 6) ** alpha


def early_stop(best_alive_logp: Tensor, finished_scores: Tensor, max_lengths: Tensor, alpha: float) -> Tensor:
    """tensor2tensor's early-stopping bound for the beam search of section 6.1, per sentence.

    best_alive_logp (B,): log P of the most probable alive hypothesis; finished_scores (B, K): scores
    log P / lp of the finished ones, -inf for an empty slot. Log-probabilities only fall as a hypothesis
    grows and, with alpha >= 0, lp only rises, so the best score an alive hypothesis can still reach is
    its log P now over the penalty at the maximum length. True where that cannot beat the worst
    finished hypothesis (of those there are; never while none has finished): the search of that
    sentence is over. -> (B,) bool."""
    ninf = float("-inf")
    present = finished_scores > ninf
    worst = torch.where(present, finished_scores, float("inf")).min(-1).values
    worst = torch.where(present.any(-1), worst, ninf)
    return cannot_win(best_alive_logp, worst, length_penalty(max_lengths.to(best_alive_logp.dtype), alpha))


def cannot_win(best_alive_logp: Tensor, finished_score: Tensor, lp_max: Tensor) -> Tensor:
    """`early_stop`'s test: the best score an alive hypothesis can still reach, its log P now over lp at the
    maximum length (`lp_max`), does not beat `finished_score` (-inf: none finished, never true). (B,) -> (B,) bool.
    The search calls it on the best finished score with lp_max computed once per batch."""
    return finished_score > best_alive_logp / lp_max


def best_extensions(stepper, logp: Tensor, alive_logp: Tensor, K: int) -> tuple[Tensor, Tensor]:
    """Each sentence's 2K best of its K x V extensions (log P of the hypothesis + log P of the token): logp
    (A, rows, V) from `stepper` (rows = 1 before the first reorder: the K beams are one BOS), alive_logp (A, K)
    -> scores and indices beam * V + token, (A, 2K) each (decoding/top_k.py). Where the stepper's tensor is the
    search's to overwrite (`fresh_output`), the sums are taken in place: the same values, no second (A, K, V) tensor."""
    A, rows, V = logp.shape
    if rows == K and getattr(stepper, "fresh_output", False):
        cand = logp.add_(alive_logp[..., None]).view(A, K * V)
    else:
        cand = (alive_logp[..., None] + logp.expand(A, K, -1)).view(A, K * V)
    return top_k(cand, min(2 * K, K * V))
