"""decoding/lean.py (issue 18): the inference step computes what the module path computes, with rows of
finished sentences dropped; its weights are the model's when the stepper is made (issue 23: never cached)."""

import pytest
import torch

from transformer_min.decoding.lean import LeanStepper
from transformer_min.decoding.search import beam_search_steps, greedy_search, max_output_lengths, strip
from transformer_min.decoding.stepper import TransformerStepper
from transformer_min.model.transformer import Transformer


def _model(**kw):
    torch.manual_seed(0)
    model = Transformer(20, 20, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=128, **kw)
    with torch.no_grad():  # LayerNorm gains and biases off their 1 / 0 start
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def _src():
    g = torch.Generator().manual_seed(5)
    src = torch.randint(3, 20, (4, 9), generator=g)
    src[1, 4:] = 0
    src[2, 6:] = 0
    src[:, -1] = torch.tensor([2, 0, 0, 2])
    src[1, 3], src[2, 5] = 2, 2
    return src


class Recording:
    """A stepper wrapper that records how many rows each step got."""

    def __init__(self, inner):
        self.inner, self.rows = inner, []

    def step(self, prefix):
        self.rows.append(prefix.size(0))
        return self.inner.step(prefix)

    def reorder(self, index):
        self.inner.reorder(index)


VARIANTS = [dict(), dict(positional="rope"), dict(positional="relative", attention_options={"relative_clip": 3}),
            dict(positional="learned"), dict(norm_first=True, final_norm=True), dict(bias=False), dict(d_k=6, d_v=10)]
IDS = ["sinusoidal", "rope", "relative", "learned", "pre-norm", "no-bias", "d_k != d_v"]


@pytest.mark.parametrize("kw", VARIANTS, ids=IDS)
def test_lean_log_probs_equal_the_uncached_module_path(kw):
    model, src = _model(**kw), _src()
    lim = max_output_lengths(src, 0, 10)
    a, la = greedy_search(LeanStepper(model, src, 0), 4, 1, 2, 0, lim, return_logprobs=True)
    b, lb = greedy_search(TransformerStepper(model, src, 0, use_cache=False), 4, 1, 2, 0, lim, return_logprobs=True)
    assert torch.equal(a, b) and len(la) == len(lb) > 5
    assert max((x - y).abs().max().item() for x, y in zip(la, lb)) < 1e-5


@pytest.mark.parametrize("kw", VARIANTS, ids=IDS)
def test_lean_beam_search_drops_finished_sentences_and_finds_the_same_hypotheses(kw):
    model, src = _model(**kw), _src()
    lim = max_output_lengths(src, 0, 10)  # sentence lengths differ, so their searches end at different steps
    lean = Recording(LeanStepper(model, src, 0, repeat=4))
    full = Recording(TransformerStepper(model, src, 0, repeat=4, use_cache=False))
    out_lean, score_lean = beam_search_steps(lean, 4, 1, 2, 0, lim, 4, 0.6)
    out_full, score_full = beam_search_steps(full, 4, 1, 2, 0, lim, 4, 0.6)
    assert strip(out_lean, 2, 0) == strip(out_full, 2, 0)
    assert torch.allclose(score_lean, score_full, atol=1e-5)
    assert lean.rows == full.rows  # both steppers were given the same rows
    assert lean.rows[0] == 16 and lean.rows[-1] < 16 and lean.rows == sorted(lean.rows, reverse=True)


def test_greedy_drops_a_sentence_once_it_has_ended():
    model, src = _model(), _src()
    rec = Recording(LeanStepper(model, src, 0))
    lim = torch.tensor([3, 8, 8, 8])  # the first sentence is cut after 3 tokens
    out = greedy_search(rec, 4, 1, 2, 0, lim)
    ref = greedy_search(TransformerStepper(model, src, 0, use_cache=False), 4, 1, 2, 0, lim, return_logprobs=True)[0]
    assert torch.equal(out, ref)
    assert rec.rows[:3] == [4, 4, 4] and all(r <= 3 for r in rec.rows[3:])


def test_inference_weights_are_a_copy_and_a_new_stepper_sees_an_in_place_change():
    model, src = _model(), _src()
    lim = max_output_lengths(src, 0, 6)
    before, generator = model.inference_weights("transposed"), model.generator.weight.clone()
    with torch.no_grad():  # in place, as fused Adam writes (torch's version counter is not a signal)
        for p in model.parameters():
            p.mul_(1.5)
    assert torch.equal(before.generator.w, generator.t())  # a copy: the change does not reach it
    a, la = greedy_search(LeanStepper(model, src, 0), 4, 1, 2, 0, lim, return_logprobs=True)  # made now
    b, lb = greedy_search(TransformerStepper(model, src, 0, use_cache=False), 4, 1, 2, 0, lim, return_logprobs=True)
    assert torch.equal(a, b) and max((x - y).abs().max().item() for x, y in zip(la, lb)) < 1e-5
    stale = greedy_search(LeanStepper(model, src, 0, weights=before), 4, 1, 2, 0, lim, return_logprobs=True)[1]
    assert max((x - y).abs().max().item() for x, y in zip(stale, lb)) > 1e-3  # the copy given is the one used


def test_lean_stepper_refuses_a_model_in_training_mode():
    model = _model().train()
    with pytest.raises(ValueError, match="model.eval"):
        LeanStepper(model, _src(), 0)


@pytest.mark.parametrize("layout", ["transposed", "linear"])
def test_both_weight_layouts_give_the_module_paths_log_probs(layout):
    model, src = _model(), _src()
    lim = max_output_lengths(src, 0, 10)
    w = model.inference_weights(layout)
    assert w.transposed == (layout == "transposed")
    a, la = greedy_search(LeanStepper(model, src, 0, weights=w), 4, 1, 2, 0, lim, return_logprobs=True)
    b, lb = greedy_search(TransformerStepper(model, src, 0, use_cache=False), 4, 1, 2, 0, lim, return_logprobs=True)
    assert torch.equal(a, b) and max((x - y).abs().max().item() for x, y in zip(la, lb)) < 1e-5


@pytest.mark.parametrize("kw", VARIANTS, ids=IDS)
def test_many_rows_take_beam_slots_where_eq1_is_the_papers_and_find_the_same_hypotheses(kw, monkeypatch):
    """Issue 37: at MANY_FROM rows or more in equal groups per sentence the self-attention cache keeps each beam's
    keys and values in place (model/beam_kv.py); not for relative positions (their own eq. (1)) nor d_k != d_v (no
    shared buffer). Either way the module path's hypotheses, as sentences end at different steps."""
    from transformer_min.model.beam_kv import BeamKV

    taken = []
    to_slots = BeamKV._to_slots
    monkeypatch.setattr(BeamKV, "_to_slots", lambda self, *a: (taken.append(a[1]), to_slots(self, *a))[1])
    model, src = _model(**kw), _src()
    lim = max_output_lengths(src, 0, 10)
    for one_row in (False, True):  # K rows per sentence from the start, or one at the first step (t2t's)
        taken.clear()
        lean = LeanStepper(model, src, 0, repeat=1 if one_row else 4)
        out_lean, score_lean = beam_search_steps(lean, 4, 1, 2, 0, lim, 4, 0.6, one_row_first=one_row)
        full = TransformerStepper(model, src, 0, repeat=1 if one_row else 4, use_cache=False)
        out_full, score_full = beam_search_steps(full, 4, 1, 2, 0, lim, 4, 0.6, one_row_first=one_row)
        assert strip(out_lean, 2, 0) == strip(out_full, 2, 0)
        assert torch.allclose(score_lean, score_full, atol=1e-5)
        assert taken == ([] if kw.get("positional") == "relative" or "d_k" in kw else [4])


def test_a_variant_with_its_own_step_attention_keeps_the_row_cache():
    """A subclass that changes eq. (1) of the step (`attend_step`) is never bypassed by the beam slots."""
    from transformer_min.model.attention import MultiHeadAttention
    from transformer_min.model.beam_kv import BeamKV
    from transformer_min.model.step_kv import StepKV

    class OwnStep(MultiHeadAttention):
        def attend_step(self, q, k, v, offset):
            return super().attend_step(q, k, v, offset)

    model, src = _model(), _src()
    memory = torch.randn(src.size(0), src.size(1), model.d_model)
    assert type(model.start_steps(memory)[0].self_kv.owner) is BeamKV
    for layer in model.decoder.layers:
        layer.self_attn.__class__ = OwnStep
    assert type(model.start_steps(memory)[0].self_kv.owner) is StepKV


def test_fill_holes_keeps_blocks_below_the_end_and_moves_the_rest_into_the_free_places():
    from transformer_min.decoding.lean import fill_holes

    assert fill_holes([0, 2, 5], 3) == [0, 2, 1]
    assert fill_holes([3, 1, 4], 3) == [0, 1, 2]
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        total = int(torch.randint(1, 12, (1,), generator=g))
        n = int(torch.randint(1, total + 1, (1,), generator=g))
        blocks = sorted(torch.randperm(total, generator=g)[:n].tolist())
        out = fill_holes(blocks, n)
        assert sorted(out) == list(range(n))  # a place for each, none shared
        assert all(o == b for o, b in zip(out, blocks) if b < n)  # below the end: not moved


def _record(stepper, monkeypatch):
    """Each step's log-probabilities (copied: the search adds to them in place) and whether the caches' rows were in
    another order than the search's."""
    seen = []
    step = stepper.step
    monkeypatch.setattr(stepper, "step", lambda p: (lambda y: (seen.append((y.clone(), stepper.rows is not None)), y)[1])(
        step(p)))
    return seen


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sentences_ending_in_any_order_keep_the_same_hypotheses_with_blocks_moved(precision, monkeypatch):
    """Issue 37: when sentences finish, the others keep their place in the caches and the last ones move into the
    holes (`LeanStepper.rows` then differs from the search's order). Every step's log-probabilities, the hypotheses
    and scores stay those of the same weights with every kept block copied in order (`fill_holes` replaced by the
    identity) and, in fp32, the module path's."""
    import transformer_min.decoding.lean as lean_mod
    from transformer_min.model.beam_kv import BeamKV

    moved = []
    keep = BeamKV._keep_blocks
    monkeypatch.setattr(BeamKV, "_keep_blocks", lambda self, first: (
        moved.append(bool((first != torch.arange(first.numel())).any())), keep(self, first))[1])
    model = _model()
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 20, (10, 12), generator=g)
    for i, n in enumerate([3, 12, 5, 9, 2, 12, 7, 4, 11, 6]):  # lengths out of order: ends in the middle too
        src[i, n - 1], src[i, n:] = 2, 0
    lim = max_output_lengths(src, 0, 4)
    weights = model.inference_weights(precision=precision)
    runs = []
    for holes in (True, False):
        if not holes:
            monkeypatch.setattr(lean_mod, "fill_holes", lambda blocks, n: list(range(n)))
        stepper = LeanStepper(model, src, 0, repeat=1, weights=weights)
        seen = _record(stepper, monkeypatch)
        runs.append((*beam_search_steps(stepper, 10, 1, 2, 0, lim, 4, 0.6, one_row_first=True), seen))
    (out, score, seen), (out_ref, score_ref, seen_ref) = runs
    assert torch.equal(out, out_ref) and torch.equal(score, score_ref)
    assert len(seen) == len(seen_ref) and all(torch.equal(a[0], b[0]) for a, b in zip(seen, seen_ref))
    assert any(p for _, p in seen) and not any(p for _, p in seen_ref)  # the step ran in the caches' order
    assert any(moved)  # blocks past the end moved into holes
    if precision == "fp32":
        full = TransformerStepper(model, src, 0, repeat=1, use_cache=False)
        out_full, score_full = beam_search_steps(full, 10, 1, 2, 0, lim, 4, 0.6, one_row_first=True)
        assert strip(out, 2, 0) == strip(out_full, 2, 0)
        assert torch.allclose(score, score_full, atol=1e-5)


def test_any_reorder_after_blocks_moved_keeps_the_module_paths_log_probs():
    """Reorders no search here makes, after the caches' order has left the search's: sentences dropped out of order
    (blocks moved), then rows of several sentences mixed and repeated (each row its own encoder side, found where the
    caches hold it). Every step's log-probabilities stay the module path's."""
    model, src = _model(), _src()
    lean = LeanStepper(model, src, 0, repeat=4)
    full = TransformerStepper(model, src, 0, repeat=4, use_cache=False)
    prefix, orders = torch.full((16, 1), 1), []
    for index in ([*range(16)], [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15], [8, 9, 10, 11, 0, 1, 2, 3],
                  [5, 0, 6, 1, 2], [4, 4, 0, 3]):
        a, b = lean.step(prefix), full.step(prefix)
        assert (a - b).abs().max().item() < 1e-5
        orders.append(lean.rows is not None)
        index = torch.tensor(index)
        prefix = torch.cat([prefix, a.argmax(-1, keepdim=True)], 1)[index]
        lean.reorder(index)
        full.reorder(index)
    assert (lean.step(prefix) - full.step(prefix)).abs().max().item() < 1e-5
    assert any(orders)  # the caches' order differed from the search's before the mixed reorders
