"""Section 6.1's beam search (tensor2tensor's, decoding/search.py) for a batch of one sentence, its bookkeeping in
Python (issue 37).

With one sentence a step's bookkeeping is about the 2K best extensions of K hypotheses: eight numbers at beam 4. The
batched search (`search._t2t_batched`) does it with some 60 tensor operations per step (gathers, masks, two top-k,
the stopping test), each a fixed cost of a few microseconds: about 0.25 ms a step on an AVX-512 AMD EPYC, 14% of an
int8 decoding at batch 1. Here the model's side stays in tensors (the step, the candidates' sums and their top 2K:
`scores.best_extensions`, the batched search's own call) and only the 2K best come to Python (`tolist`), where the
split into alive and finished hypotheses, the scores and the early stop are a few list operations.

The arithmetic is the batched search's, in float32: a finished score is the candidate's log P divided by lp(|Y|) in a
tensor, as there, and the stopping bound's division runs in NumPy float32 (IEEE division, as torch's). The one
difference is which of exactly equal scores is kept first, which torch.topk also leaves open. Tests hold the two
searches to the same hypotheses and scores (tests/decoding/test_t2t_one.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from transformer_min.decoding.scores import best_extensions, length_penalty


def t2t_one(stepper, bos_id: int, eos_id: int, pad_id: int, limit: int, lp_max: float, K: int, alpha: float,
            one_row_first: bool, device, penalty=length_penalty) -> tuple[Tensor, Tensor]:
    """The t2t search of one sentence of at most `limit` tokens, `lp_max` = lp(limit) (float32) -> its best hypothesis
    (1, L) (pad after EOS; L the steps taken) and score log P / lp(|Y|) (1,), as `beam_search_steps` returns them.
    `penalty`: lp(|Y|, alpha), the one the batched search uses (search.py passes its own)."""
    ninf = float("-inf")
    alive: list[tuple[int, ...]] = [()] * K  # the K alive hypotheses (tokens after BOS), best first
    alive_logp = [0.0] + [ninf] * (K - 1)  # all K beams start as the one BOS
    fin: list[tuple[float, tuple[int, ...]]] = []  # (score, tokens) of the finished ones, best first, at most K
    bound_lp = np.float32(lp_max)
    t = -1
    for t in range(limit):
        rows = 1 if one_row_first and t == 0 else K  # the stepper's rows
        logp = stepper.step(torch.tensor([(bos_id, *seq) for seq in alive[:rows]], device=device))  # (rows, V)
        V = logp.size(-1)
        top, idx = best_extensions(stepper, logp[None], torch.tensor([alive_logp], device=device), K)  # (1, 2K)
        scores, picks = top[0].tolist(), idx[0].tolist()
        ended = [j for j, i in enumerate(picks) if i % V == eos_id]
        if ended:  # those that ended compete with the finished ones (scores as the batched search divides them)
            div = (top[0] / penalty(t + 1, alpha)).tolist()
            fin = sorted(fin + [(div[j], alive[picks[j] // V] + (eos_id,)) for j in ended], key=lambda f: -f[0])[:K]
        going = [j for j in range(len(picks)) if picks[j] % V != eos_id][:K]  # the K best that did not end
        if len(going) < K:  # fewer did not end (a vocabulary of a few symbols): ended ones fill in at -inf, as there
            going += [j for j in ended if j not in going][:K - len(going)]
        parents = [picks[j] // V for j in going]
        alive = [alive[b] + (picks[j] % V,) for j, b in zip(going, parents)]
        alive_logp = [ninf if picks[j] % V == eos_id else scores[j] for j in going]
        if t + 1 >= limit or (fin and fin[0][0] > np.float32(max(alive_logp)) / bound_lp):  # `cannot_win`
            break
        stepper.reorder(torch.tensor([b % rows for b in parents], device=device))
    if fin and fin[0][0] > ninf:
        score, best = fin[0]
    else:  # nothing finished: the best alive, at its maximum length
        score, best = float(torch.tensor(alive_logp[:1]) / torch.tensor([lp_max])), alive[0]
    out = torch.full((1, t + 1), pad_id, dtype=torch.long, device=device)
    out[0, :len(best)] = torch.tensor(best, dtype=torch.long)
    return out, torch.tensor([score], device=device)

