"""The one-sentence t2t search (decoding/t2t_one.py, bookkeeping in Python) against the batched one
(decoding/search.py, `_t2t_batched`, in tensors) and against the plain-Python tensor2tensor reference of
test_t2t_reference.py: the same hypotheses, the same float32 scores (bit for bit against the batched search), the
same steps, the same reorders; with a scripted model and with a real one through the lean step."""

from __future__ import annotations

import pytest
import torch

from tests.decoding.test_t2t_reference import BOS, EOS, PAD, ScriptedStepper, reference_t2t
from transformer_min.decoding import search
from transformer_min.decoding.search import beam_search, beam_search_steps, inference_weights, make_stepper


class Recording(ScriptedStepper):
    """The scripted model of test_t2t_reference.py for one sentence, recording each step's prefix and reorder."""

    def __init__(self, sentence: int, eos_bias: float, rows: int, fresh: bool):
        super().__init__(1, eos_bias)
        self.sentence = [sentence] * rows
        self.fresh_output = fresh  # the one search adds in place only where the stepper allows it, as the other
        self.calls: list = []

    def step(self, prefix):
        self.calls.append(("step", prefix.tolist()))
        return super().step(prefix)

    def reorder(self, index):
        self.calls.append(("reorder", index.tolist()))
        super().reorder(index)


def run(one: bool, sentence: int, K: int, alpha: float, limit: int, eos_bias: float, one_row_first: bool,
        fresh: bool = False):
    stepper = Recording(sentence, eos_bias, 1 if one_row_first else K, fresh)
    limits = torch.tensor([limit])
    if one:
        out, score = beam_search_steps(stepper, 1, BOS, EOS, PAD, limits, K, alpha, "t2t", one_row_first)
    else:
        out, score = search._t2t_batched(stepper, 1, BOS, EOS, PAD, limits, K, alpha, one_row_first)
    return out, score, stepper.calls


@pytest.mark.parametrize("K,alpha,eos_bias", [(4, 0.6, 0.35), (4, 1.0, 0.15), (2, 0.6, 0.5), (3, 0.0, 0.25),
                                              (1, 0.6, 0.3), (5, 0.6, 0.0)])
@pytest.mark.parametrize("one_row_first", [True, False])
def test_one_sentence_search_equals_the_batched_search_and_the_reference(K, alpha, eos_bias, one_row_first):
    for sentence, limit in [(0, 1), (1, 3), (2, 9), (3, 12), (4, 20), (5, 6)]:
        out, score, calls = run(True, sentence, K, alpha, limit, eos_bias, one_row_first)
        want_out, want_score, want_calls = run(False, sentence, K, alpha, limit, eos_bias, one_row_first)
        assert torch.equal(out, want_out) and out.dtype == want_out.dtype  # pad after EOS, the same width
        assert torch.equal(score, want_score)  # float32, bit for bit
        assert calls == want_calls  # the same prefixes stepped, the same reorders, the same number of steps
        ref, ref_score, _ = reference_t2t(sentence, K, alpha, limit, eos_bias, bound_on=0)
        assert [t for t in out[0].tolist() if t != PAD] == ref
        assert float(score) == pytest.approx(ref_score, rel=1e-6, abs=1e-6)


def test_the_one_sentence_search_adds_in_place_only_on_a_fresh_output():
    """A stepper whose tensor the search may overwrite (`fresh_output`) gets the same results as one whose it may not."""
    a = run(True, 7, 4, 0.6, 10, 0.3, True, fresh=True)
    b = run(True, 7, 4, 0.6, 10, 0.3, True, fresh=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]


def test_the_searches_cover_the_case_where_nothing_finishes():
    """EOS never among the best (a strong bias against it): the best alive hypothesis at the maximum length and its
    score log P / lp(limit), from both searches."""
    out, score, _ = run(True, 3, 4, 0.6, 5, -5.0, True)
    want_out, want_score, _ = run(False, 3, 4, 0.6, 5, -5.0, True)
    assert EOS not in out[0].tolist() and out.size(1) == 5
    assert torch.equal(out, want_out) and torch.equal(score, want_score)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_trained_models_batch_one_decoding_equals_the_batched_search(precision):
    """A real model after training steps, through the lean step (the path `tmin translate` takes a line at a time):
    each sentence decoded alone by the one-sentence search = by the batched search (the same step, the same
    weights), in fp32 and, where this torch has a quantized engine, int8."""
    import torch.nn.functional as F

    from tests.decoding.test_fast_paths import V, _model, _src
    from transformer_min.core.decode_precision import int8_engine

    if precision == "int8" and int8_engine() is None:
        pytest.skip("no quantized engine in this torch build")
    model, src, g = _model(), _src(8), torch.Generator().manual_seed(3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    for _ in range(3):  # real optimizer steps before the decoding
        tgt = torch.randint(3, V, (8, 7), generator=g)
        F.cross_entropy(model(torch.randint(3, V, (8, 9), generator=g), tgt[:, :-1]).reshape(-1, V),
                        tgt[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    weights = inference_weights(model, precision)
    limits = search.max_output_lengths(src, PAD, 10)
    lengths = set()
    for s in range(src.size(0)):
        one = src[s:s + 1, :int((src[s] != PAD).sum())]
        got = beam_search(model, one, BOS, EOS, PAD, 4, 0.6, 10, weights=weights)
        stepper = make_stepper(model, one, PAD, 1, True, weights)
        try:
            want, _ = search._t2t_batched(stepper, 1, BOS, EOS, PAD, limits[s:s + 1], 4, 0.6, True)
        finally:
            search.close_stepper(stepper)
        assert torch.equal(got, want), s
        lengths.add(got.size(1))
    assert len(lengths) > 1  # sentences of several output lengths: not one case repeated


def test_batch_one_takes_the_one_sentence_search_and_larger_batches_the_batched_one(monkeypatch):
    """The dispatch these tests rely on: `beam_search_steps` with one sentence runs `t2t_one`, with two the tensors."""
    seen = []
    real = search.t2t_one
    monkeypatch.setattr(search, "t2t_one", lambda *a, **k: seen.append(1) or real(*a, **k))
    for B in (1, 2):
        stepper = ScriptedStepper(B, 0.3)
        beam_search_steps(stepper, B, BOS, EOS, PAD, torch.tensor([6] * B), 4, 0.6, "t2t", True)
    assert seen == [1]


def test_the_one_sentence_search_takes_the_length_penalty_the_search_module_holds(monkeypatch):
    """`tmin verify` swaps search.length_penalty for a wrong one to see its checks fail (tests/verify): the batch-1
    search must use that one too, for the finished scores and lp(max length) alike, as the batched search does."""
    monkeypatch.setattr(search, "length_penalty", lambda length, alpha: length ** alpha)
    swapped = []
    for sentence in range(4):
        out, score, calls = run(True, sentence, 4, 0.6, 9, 0.35, True)
        want_out, want_score, want_calls = run(False, sentence, 4, 0.6, 9, 0.35, True)
        assert torch.equal(out, want_out) and torch.equal(score, want_score) and calls == want_calls
        swapped.append((score, int((out != PAD).sum())))
    monkeypatch.undo()
    # it took: the score differs wherever the best hypothesis is longer than 1 token (1 ** a = ((5 + 1) / 6) ** a)
    differ = [not torch.equal(run(True, s, 4, 0.6, 9, 0.35, True)[1], swapped[s][0]) for s in range(4)]
    assert differ == [n > 1 for _, n in swapped] and any(differ)
