"""The batched t2t beam search (decoding/search.py) against a one-sentence-at-a-time reference written from
tensor2tensor's beam_search.py as plain Python: K alive and up to K finished hypotheses, the 2K best
extensions split each step, the early-stopping bound. A scripted model whose log-probabilities depend on the
whole prefix; sentences of one batch reach their ends and their maximum lengths at different steps, so the
batched search drops them from the stepper in the middle of the batch."""

from __future__ import annotations

import hashlib

import pytest
import torch

from transformer_min.decoding.search import beam_search_steps, length_penalty

PAD, BOS, EOS, V = 0, 1, 2, 11


def scripted_logp(prefix: list[int], sentence: int, eos_bias: float) -> torch.Tensor:
    """log-probabilities (V,) of the next token after `prefix` (BOS first) of sentence `sentence`: random, from
    a hash of both, with EOS favoured more as the prefix grows; pad and BOS never follow."""
    seed = int.from_bytes(hashlib.sha256(repr((sentence, prefix)).encode()).digest()[:8], "little")
    logits = torch.randn(V, generator=torch.Generator().manual_seed(seed))
    logits[EOS] += eos_bias * len(prefix)
    logits[PAD] = logits[BOS] = -1e9
    return torch.log_softmax(logits, -1)


class ScriptedStepper:
    """Rows are the K beams (or 1 before the first reorder) of the sentences still searched, in order; `reorder`
    keeps the sentence of each row."""

    def __init__(self, B: int, eos_bias: float):
        self.sentence, self.eos_bias = list(range(B)), eos_bias

    def step(self, prefix: torch.Tensor) -> torch.Tensor:
        assert len(self.sentence) == prefix.size(0)  # the search's reorders (the first widens to K rows) kept it so
        return torch.stack([scripted_logp(p, s, self.eos_bias) for p, s in zip(prefix.tolist(), self.sentence)])

    def reorder(self, index: torch.Tensor) -> None:
        self.sentence = [self.sentence[i] for i in index.tolist()]


def reference_t2t(sentence: int, K: int, alpha: float, limit: int, eos_bias: float,
                  bound_on: int = -1) -> tuple[list[int], float, int]:
    """One sentence, plain Python over float32 tensors (the sums the batched search makes, in the same order)
    -> (best hypothesis without BOS, its score, steps taken). `bound_on`: which finished hypothesis the early
    stop compares with, -1 the worst (tensor2tensor's) or 0 the best (ours: the only one returned)."""
    ninf = float("-inf")
    alive = [([BOS], torch.tensor(0.0 if b == 0 else ninf)) for b in range(K)]
    finished: list[tuple[list[int], torch.Tensor]] = []
    for t in range(limit):
        cands = [(lp + logp[v], seq + [v]) for seq, lp in alive if lp > ninf
                 for logp in [scripted_logp(seq, sentence, eos_bias)] for v in range(V)]
        cands.sort(key=lambda c: -float(c[0]))
        top = cands[:2 * K]
        alive = [(seq, lp) for lp, seq in top if seq[-1] != EOS][:K]
        alive += [(top[0][1], torch.tensor(ninf))] * (K - len(alive))  # slots with nothing alive: -inf
        ended = [(seq, lp / length_penalty(t + 1, alpha)) for lp, seq in top if seq[-1] == EOS]
        finished = sorted(finished + ended, key=lambda f: -float(f[1]))[:K]
        bound = alive[0][1] / length_penalty(torch.tensor(float(limit)), alpha)
        if t + 1 >= limit or (finished and float(finished[bound_on][1]) > float(bound)):
            break
    if finished:
        return finished[0][0][1:], float(finished[0][1]), t + 1
    return alive[0][0][1:], float(alive[0][1] / length_penalty(torch.tensor(float(limit)), alpha)), t + 1


@pytest.mark.parametrize("K,alpha,eos_bias", [(4, 0.6, 0.35), (4, 1.0, 0.15), (2, 0.6, 0.5), (3, 0.0, 0.25)])
@pytest.mark.parametrize("one_row_first", [True, False])
def test_batched_t2t_search_equals_the_one_sentence_reference(K, alpha, eos_bias, one_row_first):
    limits = torch.tensor([3, 9, 6, 12, 1, 8])  # sentences stop at different steps
    B = limits.numel()
    stepper = ScriptedStepper(B, eos_bias)
    if not one_row_first:
        stepper.sentence = [s for s in range(B) for _ in range(K)]
    out, scores = beam_search_steps(stepper, B, BOS, EOS, PAD, limits, K, alpha, "t2t", one_row_first)
    steps, t2t_steps = [], []
    for s in range(B):
        want, want_score, n = reference_t2t(s, K, alpha, int(limits[s]), eos_bias)  # tensor2tensor's bound
        t2t_steps.append(n)
        steps.append(reference_t2t(s, K, alpha, int(limits[s]), eos_bias, bound_on=0)[2])
        got = [tok for tok in out[s].tolist() if tok != PAD]
        assert got == want, (s, got, want)  # the same output as tensor2tensor's search
        assert float(scores[s]) == pytest.approx(want_score, rel=1e-6, abs=1e-6)
    assert out.size(1) == max(steps)  # the batch runs until its last sentence stops (early stop included)
    assert all(n <= m for n, m in zip(steps, t2t_steps))  # never longer than tensor2tensor's bound runs
    assert sum(steps) < sum(t2t_steps)  # and shorter for some sentence: the case this test is for
    assert min(steps) < max(steps) and any(n < int(lim) for n, lim in zip(steps, limits))  # the test's premise
