"""Decoding (section 6.1): a scripted fake model with hand-computed scores, and the real model's
cached decoding against full recomputation."""

import math

import pytest
import torch

from transformer_min.decoding import (
    TransformerStepper,
    beam_search,
    beam_search_steps,
    greedy_decode,
    greedy_search,
    length_penalty,
    max_output_lengths,
    strip,
)
from transformer_min.model import Transformer

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
V = 5


class ScriptedStepper:
    """Next-token probabilities written out per prefix (tokens after BOS); unknown prefix -> EOS."""

    def __init__(self, table):
        self.table = table

    def step(self, prefix):
        rows = []
        for seq in prefix.tolist():
            key = tuple(t for t in seq[1:] if t != PAD)
            probs = dict(self.table.get(key, {EOS: 1.0}))
            p = torch.full((V,), 1e-12, dtype=torch.float64)
            for tok, pr in probs.items():
                p[tok] = pr
            rows.append(torch.log(p / p.sum()))
        return torch.stack(rows).float()

    def reorder(self, index):
        pass


TABLE = {
    (): {A: 0.5, B: 0.4, EOS: 0.1},
    (A,): {EOS: 0.3, A: 0.3, B: 0.4},
    (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    (A, B): {EOS: 0.5, A: 0.25, B: 0.25},
}


def test_gnmt_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx((12 / 6) ** 0.6)
    assert length_penalty(10, 0.0) == 1.0


def test_greedy_follows_the_most_probable_token():
    out = greedy_search(ScriptedStepper(TABLE), 1, BOS, EOS, PAD, torch.tensor([10]))
    assert strip(out, EOS, PAD) == [[A, B]]  # A (0.5), then B (0.4), then EOS (0.5)


def test_beam_finds_the_better_hypothesis_with_hand_computed_score():
    out, score = beam_search_steps(ScriptedStepper(TABLE), 1, BOS, EOS, PAD, torch.tensor([10]),
                                   beam_size=2, alpha=0.6)
    assert strip(out, EOS, PAD) == [[B]]  # P(B EOS) = 0.4 * 0.9 = 0.36 beats P(A B EOS) = 0.1
    want = math.log(0.36) / ((5 + 2) / 6) ** 0.6  # |Y| = 2 counts EOS
    assert score.item() == pytest.approx(want, rel=1e-4)


def test_length_penalty_changes_the_winner():
    table = {(): {EOS: 0.3, A: 0.7}, (A,): {EOS: 0.4, A: 0.3, B: 0.3}}
    lengths = torch.tensor([10])
    short, s0 = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lengths, beam_size=3, alpha=0.0)
    long, s1 = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lengths, beam_size=3, alpha=1.0)
    assert strip(short, EOS, PAD) == [[]]  # log 0.3 = -1.20 > log 0.28 = -1.27
    assert s0.item() == pytest.approx(math.log(0.3), rel=1e-4)
    assert strip(long, EOS, PAD) == [[A]]  # log 0.28 / (7/6) = -1.09 > log 0.3 / 1 = -1.20
    assert s1.item() == pytest.approx(math.log(0.28) / (7 / 6), rel=1e-4)


def test_maximum_length_is_input_plus_offset():
    src = torch.tensor([[5, 6, 7, 2, 0], [5, 2, 0, 0, 0]])
    assert max_output_lengths(src, PAD, 50).tolist() == [54, 52]
    never_ends = {(): {A: 1.0}}

    class Loop(ScriptedStepper):
        def step(self, prefix):
            lp = torch.full((prefix.size(0), V), -30.0)
            lp[:, A] = 0.0
            return lp

    out = greedy_search(Loop(never_ends), 2, BOS, EOS, PAD, torch.tensor([3, 5]))
    assert [len(s) for s in strip(out, EOS, PAD)] == [3, 5]


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return Transformer(20, 20, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=128).eval()


def _src():
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 20, (3, 7), generator=g)
    src[1, 5:] = 0
    src[:, 4] = torch.tensor([2, 2, 9])
    return src


def test_cached_decoding_equals_full_recompute(tiny_model):
    src = _src()
    lim = max_output_lengths(src, 0, 12)
    a, la = greedy_search(TransformerStepper(tiny_model, src, 0, use_cache=True), 3, 1, 2, 0, lim, True)
    b, lb = greedy_search(TransformerStepper(tiny_model, src, 0, use_cache=False), 3, 1, 2, 0, lim, True)
    assert torch.equal(a, b) and len(la) == len(lb) > 5
    for x, y in zip(la, lb):
        assert torch.allclose(x, y, atol=1e-5)
    cached = beam_search(tiny_model, src, 1, 2, 0, 4, 0.6, 12, use_cache=True)
    full = beam_search(tiny_model, src, 1, 2, 0, 4, 0.6, 12, use_cache=False)
    assert torch.equal(cached, full)


def test_beam_one_equals_greedy(tiny_model):
    src = _src()
    assert torch.equal(greedy_decode(tiny_model, src, 1, 2, 0, 12),
                       beam_search(tiny_model, src, 1, 2, 0, beam_size=1, alpha=0.6, max_len_offset=12))


def test_batched_beam_equals_one_sentence_at_a_time(tiny_model):
    src = _src()
    batched = strip(beam_search(tiny_model, src, 1, 2, 0, 4, 0.6, 12), 2, 0)
    single = [strip(beam_search(tiny_model, src[i:i + 1, :int((src[i] != 0).sum())], 1, 2, 0, 4, 0.6, 12), 2, 0)[0]
              for i in range(3)]
    assert batched == single


def test_alpha_grid_grows_while_its_largest_alpha_wins_on_val():
    from transformer_min.decoding import choose_alpha

    peak = {0.6: 30.0, 1.0: 31.0, 1.4: 32.0, 1.8: 32.5, 2.2: 32.1, 2.6: 99.0}  # 2.6 is never reached
    tried = []
    scores = choose_alpha(lambda a: tried.append(a) or peak[a], [0.6, 1.0, 1.4], step=0.4)
    assert tried == [0.6, 1.0, 1.4, 1.8, 2.2] and max(scores, key=scores.get) == 1.8
    assert choose_alpha(lambda a: peak[a], [0.6, 1.0, 1.4], step=0) == {0.6: 30.0, 1.0: 31.0, 1.4: 32.0}
    assert list(choose_alpha(lambda a: 1.0, [0.6, 1.0], step=0.4)) == [0.6, 1.0]  # a tie: the first wins
    assert max(choose_alpha(lambda a: a, [0.6], step=0.4, max_alpha=1.4)) == 1.4  # capped
