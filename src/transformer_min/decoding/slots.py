"""This project's earlier beam search (decode.search = "slots"), kept beside the paper's (decoding/search.py).

Finished hypotheses stay in the K slots, ranked against the live ones by score, so each one that ends narrows the
live beam; a hypothesis that reaches the maximum length counts as finished; it stops when every slot has finished.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.decoding.scores import length_penalty
from transformer_min.decoding.stepper import Stepper


def slots_search(stepper: Stepper, B: int, bos_id: int, eos_id: int, pad_id: int, max_lengths: Tensor,
                  K: int, alpha: float) -> tuple[Tensor, Tensor]:
    device = max_lengths.device
    N = B * K
    ys = torch.full((N, 1), bos_id, dtype=torch.long, device=device)
    logp_sum = torch.zeros(B, K, device=device)
    logp_sum[:, 1:] = float("-inf")  # all beams start identical: keep one
    lengths = torch.zeros(B, K, device=device)
    finished = torch.zeros(B, K, dtype=torch.bool, device=device)
    limit = max_lengths.repeat_interleave(K).view(B, K)
    base = torch.arange(B, device=device)[:, None] * K  # (B, 1) row offset of each sentence
    for t in range(int(max_lengths.max())):
        logp = stepper.step(ys).view(B, K, -1)  # (B, K, V)
        V = logp.size(-1)
        # finished hypotheses continue only with pad, at no cost and no added length
        carry = torch.full_like(logp, float("-inf"))
        carry[..., pad_id] = 0.0
        logp = torch.where(finished[..., None], carry, logp)
        cand = logp_sum[..., None] + logp  # (B, K, V)
        cand_len = torch.where(finished, lengths, lengths + 1)[..., None].expand(B, K, V)
        norm = cand / length_penalty(cand_len, alpha)
        norm = norm.masked_fill(torch.isnan(norm), float("-inf"))
        top, idx = norm.view(B, K * V).topk(K, dim=-1)  # (B, K)
        beam, token = idx // V, idx % V
        rows = (base + beam).view(-1)  # (N,) source rows
        logp_sum = cand.view(B, K * V).gather(1, idx)
        lengths = cand_len.reshape(B, K * V).gather(1, idx)
        was_finished = finished.gather(1, beam)
        finished = was_finished | (token == eos_id) | (lengths >= limit)
        ys = torch.cat([ys.index_select(0, rows), token.view(-1, 1)], dim=1)
        stepper.reorder(rows)
        if finished.all():
            break
    final = logp_sum / length_penalty(lengths, alpha)
    best = final.argmax(-1)  # (B,)
    out = ys.view(B, K, -1)[torch.arange(B, device=device), best, 1:]
    return out, final.gather(1, best[:, None]).squeeze(1)
