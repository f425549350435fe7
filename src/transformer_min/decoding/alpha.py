"""Choosing the length penalty alpha on held-out data (section 6.1: the paper tuned its beam search's alpha on
the development set; GNMT's penalty, decoding/search.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def choose_alpha(score: Callable[[float], float], alphas: Sequence[float], step: float = 0.4,
                 max_alpha: float = 3.0) -> dict[float, float]:
    """Pick the length penalty alpha on held-out data (GNMT's alpha; the paper tuned it on the dev set,
    section 6.1). `score(alpha)` is e.g. val BLEU. While the best alpha is the largest tried, go on in
    `step`s up to `max_alpha`: a grid whose edge still wins has not found the best. Ties keep the first.
    Returns every alpha tried -> its score; the choice is `max(scores, key=scores.get)`."""
    scores = {float(a): score(float(a)) for a in alphas}
    while step > 0:
        top = max(scores)
        nxt = round(top + step, 6)
        if max(scores, key=scores.get) != top or nxt > max_alpha + 1e-9:
            break
        scores[nxt] = score(nxt)
    return scores
