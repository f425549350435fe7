"""The k best of a beam's K x V candidates, in one pass over them (section 6.1's beam search; issue 37).

Each step of the beam search keeps the 2K best of K x V extended hypotheses per sentence (32,000 scores for
beam 4 and an 8k vocabulary). `torch.topk` over such a row was 8-10% of a decoding step on the CPUs measured
(docs/performance.md): it selects among all n scores. `top_k` returns the same k largest values from far fewer:

1. view the row as c strided groups, group g = {g, g + m, g + 2m, ...} (m = n // c), and take each group's
   maximum: an elementwise max of c contiguous slices of length m, which vectorises;
2. the k groups with the largest maxima hold k largest scores: a score among the k largest lies in a group
   whose maximum is at least that score, and fewer than k groups can beat it without their maxima being
   k scores above it;
3. select the k largest of those k groups' c k scores (and the n - c m left over at the end of the row).

The values are always `torch.topk`'s, and so are the indices where the scores are distinct (log-probability
sums almost always are). Which of several equal scores is taken is left open, as `torch.topk` leaves it; it is
deterministic (torch.topk of the candidates, the same input giving the same order). Tests hold it to torch.topk and
to a full sort of the row.
"""

from __future__ import annotations

import torch
from torch import Tensor

GROUPS = 32  # c: the candidates kept are c k; the group maxima read every score once
MIN_WIDTH = 4096  # narrower rows go to torch.topk, whose cost there is small


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest values of each row of x (A, n), in descending order, and their indices -> (A, k), (A, k)."""
    A, n = x.shape
    m = n // GROUPS  # the number of groups (and of scores in each of the c slices)
    if n < MIN_WIDTH or m <= k:
        return x.topk(k, dim=-1)
    group_max = x[:, : GROUPS * m].view(A, GROUPS, m).amax(dim=1)  # (A, m)
    groups = group_max.topk(k, dim=-1).indices  # (A, k)
    offsets = torch.arange(0, GROUPS * m, m, device=x.device).view(GROUPS, 1)  # (c, 1): the start of each slice
    pos = (groups.unsqueeze(1) + offsets).view(A, GROUPS * k)  # (A, c, k) -> (A, c k)
    if GROUPS * m < n:  # the scores after the last whole slice are candidates as they are
        tail = torch.arange(GROUPS * m, n, device=x.device).expand(A, -1)
        pos = torch.cat([pos, tail], dim=1)
    values, order = x.gather(1, pos).topk(k, dim=-1)  # of the c k candidates (a stable sort: 4-6x the time)
    return values, pos.gather(1, order)
