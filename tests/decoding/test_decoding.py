"""Decoding (section 6.1): a scripted fake model with hand-computed scores, and the real model's
cached decoding against full recomputation."""

import math

import pytest
import torch

from transformer_min.decoding.search import (
    beam_search,
    beam_search_steps,
    early_stop,
    greedy_decode,
    greedy_search,
    length_penalty,
    max_output_lengths,
    strip,
)
from transformer_min.decoding.stepper import TransformerStepper
from transformer_min.model.transformer import Transformer

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


def variant_model(positional: str, kernel: str):
    torch.manual_seed(0)
    return Transformer(20, 20, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=128,
                       positional=positional, kernel=kernel, attention_options=(
                           {"relative_clip": 3} if positional == "relative" else None)).eval()


@pytest.mark.parametrize("search", ["t2t", "slots"])
def test_cached_decoding_equals_full_recompute(tiny_model, search):
    greedy, steps, worst, beams = cached_and_full(tiny_model, search)
    assert torch.equal(*greedy) and steps > 5 and worst <= 1e-5
    assert torch.equal(*beams)


@pytest.mark.parametrize("kernel", ["fused", "matmul"])
@pytest.mark.parametrize("positional", ["rope", "relative", "learned"])
def test_cached_decoding_equals_full_recompute_for_every_positional_variant(positional, kernel):
    """The KV cache with rotary / relative self-attention (the step's positions start at the cache
    length) gives the same log-probs and the same greedy and beam outputs as re-running the prefix."""
    greedy, steps, worst, beams = cached_and_full(variant_model(positional, kernel), "t2t")
    assert torch.equal(*greedy) and steps > 5 and worst <= 1e-5
    assert torch.equal(*beams)


def cached_and_full(model, search):
    """Greedy outputs (cached, full), the number of steps, the largest log-prob difference over them, and
    beam outputs (cached, full), each pair decoded once with the KV cache and once re-running the prefix."""
    src = _src()
    lim = max_output_lengths(src, 0, 12)
    a, la = greedy_search(TransformerStepper(model, src, 0, use_cache=True), 3, 1, 2, 0, lim, True)
    b, lb = greedy_search(TransformerStepper(model, src, 0, use_cache=False), 3, 1, 2, 0, lim, True)
    worst = max((x - y).abs().max().item() for x, y in zip(la, lb)) if len(la) == len(lb) else float("inf")
    beams = tuple(beam_search(model, src, 1, 2, 0, 4, 0.6, 12, use_cache=c, search=search) for c in (True, False))
    return (a, b), min(len(la), len(lb)), worst, beams


def test_beam_one_equals_greedy(tiny_model):
    src = _src()
    assert torch.equal(greedy_decode(tiny_model, src, 1, 2, 0, 12),
                       beam_search(tiny_model, src, 1, 2, 0, beam_size=1, alpha=0.6, max_len_offset=12))


@pytest.mark.parametrize("search", ["t2t", "slots"])
def test_batched_beam_equals_one_sentence_at_a_time(tiny_model, search):
    src = _src()  # sentences of 7 and 5 tokens: limits 19 and 17, so one sentence stops before another
    batched = strip(beam_search(tiny_model, src, 1, 2, 0, 4, 0.6, 12, search=search), 2, 0)
    single = [strip(beam_search(tiny_model, src[i:i + 1, :int((src[i] != 0).sum())], 1, 2, 0, 4, 0.6, 12,
                                search=search), 2, 0)[0]
              for i in range(3)]
    assert batched == single


def test_alpha_grid_grows_while_its_largest_alpha_wins_on_val():
    from transformer_min.decoding.alpha import choose_alpha

    peak = {0.6: 30.0, 1.0: 31.0, 1.4: 32.0, 1.8: 32.5, 2.2: 32.1, 2.6: 99.0}  # 2.6 is never reached
    tried = []
    scores = choose_alpha(lambda a: tried.append(a) or peak[a], [0.6, 1.0, 1.4], step=0.4)
    assert tried == [0.6, 1.0, 1.4, 1.8, 2.2] and max(scores, key=scores.get) == 1.8
    assert choose_alpha(lambda a: peak[a], [0.6, 1.0, 1.4], step=0) == {0.6: 30.0, 1.0: 31.0, 1.4: 32.0}
    assert list(choose_alpha(lambda a: 1.0, [0.6, 1.0], step=0.4)) == [0.6, 1.0]  # a tie: the first wins
    assert max(choose_alpha(lambda a: a, [0.6], step=0.4, max_alpha=1.4)) == 1.4  # capped


# ---------------------------------------------------------------- tensor2tensor's search against the slots search
class Counting(ScriptedStepper):
    calls = 0

    def step(self, prefix):
        self.calls += 1
        return super().step(prefix)


# After BOS: A 0.46, EOS 0.29, B 0.25. After A: A 0.35, B 0.35, EOS 0.30. After B: EOS 0.99.
# Unknown prefixes end (EOS 1.0). Beam 2, alpha 1: lp(1) = 1, lp(2) = 7/6, lp(3) = 8/6, lp(10) = 15/6.
ENDS_EARLY = {
    (): {A: 0.46, EOS: 0.29, B: 0.25},
    (A,): {A: 0.35, B: 0.35, EOS: 0.30},
    (B,): {EOS: 0.99, A: 0.005, B: 0.005},
}


def test_a_finished_hypothesis_never_takes_an_alive_slot_in_t2t():
    lim = torch.tensor([10])
    # slots: step 1 keeps A (log 0.46 = -0.777) and [EOS] (log 0.29 = -1.238) in the 2 slots; B (-1.386) is
    # dropped. Step 2: [EOS] -1.238 and AA or AB (log 0.161 / (7/6) = -1.565) beat A EOS (-1.716).
    # Step 3: AA EOS (log 0.161 / (8/6) = -1.370) finishes; best of the finished pair: [EOS] -> [].
    out, score = beam_search_steps(ScriptedStepper(ENDS_EARLY), 1, BOS, EOS, PAD, lim, 2, 1.0, search="slots")
    assert strip(out, EOS, PAD) == [[]]
    assert score.item() == pytest.approx(math.log(0.29), rel=1e-4)
    # t2t: step 1 keeps A and B alive, [EOS] goes to the finished set. Step 2: B EOS
    # (log 0.2475 / (7/6) = -1.197) and [EOS] (-1.238) are the 2 finished ones; A EOS (-1.716) is not.
    # Step 3: AA EOS (-1.370) does not enter; the best alive can no longer reach -1.238: stop -> [B].
    out, score = beam_search_steps(ScriptedStepper(ENDS_EARLY), 1, BOS, EOS, PAD, lim, 2, 1.0, search="t2t")
    assert strip(out, EOS, PAD) == [[B]]
    assert score.item() == pytest.approx(math.log(0.25 * 0.99) / (7 / 6), rel=1e-4)


class NeverEnds(ScriptedStepper):
    """A 0.6, B 0.4 after any prefix; EOS impossible."""

    def step(self, prefix):
        self.calls = getattr(self, "calls", 0) + 1
        lp = torch.full((prefix.size(0), V), float("-inf"))
        lp[:, A], lp[:, B] = math.log(0.6), math.log(0.4)
        return lp


def test_t2t_stops_when_the_early_stopping_bound_is_met():
    lim = torch.tensor([10])
    # Beam 2, alpha 0 (scores are log P). After BOS: EOS 0.5, A 0.3, B 0.2. Step 1 finishes [EOS] (-0.693);
    # the best alive, A (-1.204), can only fall: stop after one step although one slot is still empty.
    first = Counting({(): {EOS: 0.5, A: 0.3, B: 0.2}})
    out, _ = beam_search_steps(first, 1, BOS, EOS, PAD, lim, 2, 0.0, search="t2t")
    assert first.calls == 1 and strip(out, EOS, PAD) == [[]]
    # After BOS: A 0.6, B 0.3, EOS 0.1; after A: EOS 0.7, A 0.3; after B: A 0.5, B 0.5; longer prefixes end.
    # Step 1: finished [EOS] (-2.303); alive A (-0.511), B. Step 2: finished A EOS (-0.868) and [EOS];
    # alive A A (0.18, -1.715) can still beat the worst finished (-2.303), so tensor2tensor's bound goes on
    # to step 3 (A A EOS, -1.715, replaces [EOS]) for a second hypothesis that is never returned; it cannot
    # beat the best finished (-0.868), which is all the search returns: stop after 2 steps with [A].
    table = Counting({(): {A: 0.6, B: 0.3, EOS: 0.1}, (A,): {EOS: 0.7, A: 0.3}, (B,): {A: 0.5, B: 0.5}})
    out, score = beam_search_steps(table, 1, BOS, EOS, PAD, lim, 2, 0.0, search="t2t")
    assert table.calls == 2 and strip(out, EOS, PAD) == [[A]]
    assert score.item() == pytest.approx(math.log(0.42), rel=1e-4)
    never_ends = NeverEnds({})
    beam_search_steps(never_ends, 1, BOS, EOS, PAD, torch.tensor([4]), 2, 0.6, search="t2t")
    assert never_ends.calls == 4  # nothing finishes: the bound never holds, the limit stops it


def test_early_stopping_bound_on_its_own():
    ninf = float("-inf")
    lp10 = (15 / 6) ** 0.6  # 1.7329: the largest penalty a hypothesis limited to 10 tokens can reach
    alive = torch.tensor([-2.0, -2.0, -2.0, -2.0, -2.0])
    finished = torch.tensor([[-0.5, -1.1], [-0.5, -1.2], [ninf, ninf], [-0.5, -1.1], [-1.1, ninf]])
    lim = torch.tensor([10, 10, 10, 30, 10])
    # -2.0 / 1.7329 = -1.154: a worst finished of -1.1 cannot be beaten, -1.2 can; nothing finished never
    # stops; a limit of 30 lets the alive one reach -2.0 / ((35/6) ** 0.6) = -0.694, above -1.1; one
    # finished hypothesis in two slots is the worst there is
    assert early_stop(alive, finished, lim, 0.6).tolist() == [True, False, False, False, True]
    assert -2.0 / lp10 == pytest.approx(-1.1541, abs=1e-4)
    # alpha 0: no length reward, the alive one can reach at best its log P now
    worst = torch.tensor([[-1.99], [-2.01], [-2.0], [ninf], [-0.1]])
    assert early_stop(alive, worst, lim, 0.0).tolist() == [True, False, False, False, True]


def test_at_the_maximum_length_t2t_returns_a_finished_hypothesis_and_slots_a_cut_one():
    table = {(): {A: 0.9, EOS: 0.1}, (A,): {A: 0.9, EOS: 0.1}}
    lim = torch.tensor([2])
    out, score = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lim, 2, 0.0, search="slots")
    assert strip(out, EOS, PAD) == [[A, A]] and score.item() == pytest.approx(math.log(0.81), rel=1e-4)
    out, score = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lim, 2, 0.0, search="t2t")
    # finished: [EOS] log 0.1 and A EOS log 0.09; A A is still alive when the limit stops the search
    assert strip(out, EOS, PAD) == [[]] and score.item() == pytest.approx(math.log(0.1), rel=1e-4)


def test_t2t_returns_the_best_alive_hypothesis_when_nothing_finished():
    out, score = beam_search_steps(NeverEnds({}), 1, BOS, EOS, PAD, torch.tensor([3]), 2, 0.6)
    assert strip(out, EOS, PAD) == [[A, A, A]]  # 0.6 ** 3 = 0.216 beats A A B (0.144)
    assert score.item() == pytest.approx(3 * math.log(0.6) / ((5 + 3) / 6) ** 0.6, rel=1e-4)


def test_beam_one_t2t_search_keeps_an_ended_hypothesis_so_beam_search_uses_greedy():
    table = {(): {A: 0.5, EOS: 0.4, B: 0.1}, (A,): {EOS: 0.6, A: 0.2, B: 0.2}}
    lim = torch.tensor([10])
    greedy = strip(greedy_search(ScriptedStepper(table), 1, BOS, EOS, PAD, lim), EOS, PAD)
    assert greedy == [[A]]  # P(A EOS) = 0.3
    t2t, _ = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lim, 1, 0.0, search="t2t")
    assert strip(t2t, EOS, PAD) == [[]]  # the 2 best extensions of step 1 include [EOS], P = 0.4 > 0.3
    slots, _ = beam_search_steps(ScriptedStepper(table), 1, BOS, EOS, PAD, lim, 1, 0.0, search="slots")
    assert strip(slots, EOS, PAD) == greedy


def test_slots_search_with_beam_one_is_greedy(tiny_model):
    src = _src()
    lim = max_output_lengths(src, 0, 12)
    greedy = greedy_search(TransformerStepper(tiny_model, src, 0), 3, 1, 2, 0, lim)
    slots, _ = beam_search_steps(TransformerStepper(tiny_model, src, 0), 3, 1, 2, 0, lim, 1, 0.6, "slots")
    assert strip(slots, 2, 0) == strip(greedy, 2, 0)


def test_unknown_search_is_named():
    with pytest.raises(ValueError, match="search: expected one of"):
        beam_search_steps(ScriptedStepper(TABLE), 1, BOS, EOS, PAD, torch.tensor([3]), 2, 0.6, search="t2")
