"""Issue 37: the fast paths of the inference step (oneDNN-prepacked weights, the encoder-decoder keys and values
read once per sentence, eq. (1) as two batched products, the KV cache reordered into its spare buffers) give
what the paper path gives (the module path without a cache), where users run them: after a reload, after
training steps, at batch 1 and 32."""

import io

import pytest
import torch
import torch.nn.functional as F

import transformer_min.model.inference as inference
from transformer_min.decoding.lean import LeanStepper
from transformer_min.decoding.search import beam_search, beam_search_steps, greedy_search, max_output_lengths, strip
from transformer_min.decoding.stepper import TransformerStepper
from transformer_min.model.attention import few_query_attention
from transformer_min.model.kv_cache import KVCache
from transformer_min.model.transformer import Transformer

V = 24
ARGS = dict(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=128)


def _model(seed=0):
    torch.manual_seed(seed)
    model = Transformer(V, V, **ARGS)
    with torch.no_grad():  # LayerNorm gains and biases off their 1 / 0 start
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def _src(batch, seed=5):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 12, (batch,), generator=g)
    src = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        src[i, :n - 1] = torch.randint(3, V, (n - 1,), generator=g)
        src[i, n - 1] = 2  # EOS
    return src


def _beam(stepper, src, K=4):
    lim = max_output_lengths(src, 0, 10)
    out, score = beam_search_steps(stepper, src.size(0), 1, 2, 0, lim, K, 0.6, one_row_first=True)
    return strip(out, 2, 0), score


def _fast_and_paper(model, src) -> dict:
    """Beam (hypotheses, scores) and greedy (tokens, per-step log-probs) of the fast step and of the paper path."""
    lim = max_output_lengths(src, 0, 10)
    out = {}
    for name, make in (("fast", lambda: LeanStepper(model, src, 0)),
                       ("paper", lambda: TransformerStepper(model, src, 0, repeat=1, use_cache=False))):
        hyps, scores = _beam(make(), src)
        tokens, logps = greedy_search(make(), src.size(0), 1, 2, 0, lim, return_logprobs=True)
        out[name] = dict(hyps=hyps, scores=scores, tokens=tokens, logps=torch.stack(logps))
    return out


def _same_as_paper_path(model, src) -> dict:
    """Asserts the fast step gives the paper path's beam and greedy outputs; returns both (`_fast_and_paper`)."""
    r = _fast_and_paper(model, src)
    fast, paper = r["fast"], r["paper"]
    assert fast["hyps"] == paper["hyps"]
    assert torch.allclose(fast["scores"], paper["scores"], atol=1e-5)
    assert torch.equal(fast["tokens"], paper["tokens"])
    assert (fast["logps"] - paper["logps"]).abs().max().item() < 1e-5
    return r


def _paper_scores(model, src) -> torch.Tensor:
    """The paper path's beam scores alone."""
    return _beam(TransformerStepper(model, src, 0, repeat=1, use_cache=False), src)[1]


@pytest.mark.parametrize("batch", [1, 32])
def test_the_fast_step_equals_the_paper_path_after_a_reload(batch):
    buf = io.BytesIO()
    torch.save(_model().state_dict(), buf)
    buf.seek(0)
    model = Transformer(V, V, **ARGS)
    model.load_state_dict(torch.load(buf))
    src = _src(batch)
    r = _same_as_paper_path(model.eval(), src)
    # the reloaded weights are the ones decoded with: the saved model's own scores, not a fresh model's
    assert torch.allclose(r["fast"]["scores"], _paper_scores(_model(), src), atol=1e-5)
    assert not torch.allclose(r["fast"]["scores"], _paper_scores(_model(seed=7), src))


@pytest.mark.parametrize("batch", [1, 32])
def test_the_fast_step_equals_the_paper_path_after_training_steps(batch):
    model, src = _model(), _src(batch)
    before = _beam(LeanStepper(model, src, 0), src)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(3):  # real steps: the weights the next decoding must see change in place
        tgt = torch.randint(3, V, (8, 7), generator=g)
        logits = model(torch.randint(3, V, (8, 9), generator=g), tgt[:, :-1])
        F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    _same_as_paper_path(model, src)
    assert _beam(LeanStepper(model, src, 0), src)[1].tolist() != before[1].tolist()  # the new weights were used


def test_onednn_prepacked_products_equal_the_blas_ones(monkeypatch):
    if not inference.onednn_prepacked():
        pytest.skip("no oneDNN prepacked linear on this CPU or torch build")
    lin = torch.nn.Linear(32, 40)
    x = torch.randn(5, 32)
    monkeypatch.setattr(inference, "decode_gemm", lambda i, o, dtype: "onednn")  # whichever this machine measured
    fast = inference.Packed(True, lin)
    assert fast.onednn is not None
    monkeypatch.setattr(inference, "onednn_prepacked", lambda: False)
    blas = inference.Packed(True, lin)
    assert blas.onednn is None
    assert torch.allclose(fast(x), blas(x), atol=1e-6) and torch.allclose(fast(x), lin(x), atol=1e-6)
    assert torch.equal(fast(x)[:1], fast(x[:1]))  # a row's result does not depend on the other rows


@pytest.mark.parametrize("call", ["onednn", "blas"])
def test_the_products_relu_and_residual_sum_are_the_separate_operators(monkeypatch, call):
    """Packed.relu and Packed.add (the FFN's inner layer, the sub-layers' residual sums in the step), with the
    oneDNN weight or the BLAS call: bit-identical to the product followed by torch.relu / the residual + product,
    and within rounding of nn.Linear's; under autocast the BLAS call's own (bf16, the sum in fp32)."""
    if call == "onednn" and not inference.onednn_prepacked():
        pytest.skip("no oneDNN prepacked linear on this CPU or torch build")
    monkeypatch.setattr(inference, "decode_gemm", lambda i, o, dtype: call)
    lin = torch.nn.Linear(32, 40)
    p = inference.Packed(True, lin)
    assert (p.onednn is not None) == (call == "onednn")
    x, residual = torch.randn(5, 32), torch.randn(5, 40)
    with torch.inference_mode():
        assert torch.equal(p.relu(x), torch.relu(p(x))) and torch.equal(p.add(x, residual), residual + p(x))
        assert torch.allclose(p.add(x, residual), residual + lin(x), atol=1e-6)
        assert torch.allclose(p.relu(x), torch.relu(lin(x)), atol=1e-6) and (p.relu(x) == 0).any()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert p.relu(x).dtype == torch.bfloat16 and p.add(x, residual).dtype == torch.float32
            assert torch.allclose(p.add(x, residual), residual + lin(x).float(), atol=0.1)


def test_the_measured_gemm_choice_decides_per_shape(monkeypatch):
    if not inference.onednn_prepacked():
        pytest.skip("no oneDNN prepacked linear on this CPU or torch build")
    monkeypatch.setattr(inference, "decode_gemm", lambda i, o, dtype: "onednn" if o > 100 else "blas")
    small, large = torch.nn.Linear(32, 40), torch.nn.Linear(32, 200)
    assert inference.Packed(True, small).onednn is None and inference.Packed(True, large).onednn is not None
    x = torch.randn(4, 32)
    assert torch.allclose(inference.Packed(True, small)(x), small(x), atol=1e-6)
    assert torch.allclose(inference.Packed(True, large)(x), large(x), atol=1e-5)


@pytest.mark.parametrize("batch", [1, 32])
def test_with_and_without_onednn_the_same_hypotheses(monkeypatch, batch):
    model, src = _model(), _src(batch)
    monkeypatch.setattr(inference, "decode_gemm", lambda i, o, dtype: "onednn")
    fast = _beam(LeanStepper(model, src, 0), src)
    monkeypatch.setattr(inference, "onednn_prepacked", lambda: False)
    blas = _beam(LeanStepper(model, src, 0), src)
    assert fast[0] == blas[0] and torch.allclose(fast[1], blas[1], atol=1e-5)


def test_rows_out_of_their_sentence_groups_get_their_own_encoder_keys():
    # a reorder that mixes sentences (not what the searches do) falls back to one copy of K, V per row
    model, src = _model(), _src(3)
    lean = LeanStepper(model, src, 0, repeat=2)
    ref = TransformerStepper(model, src, 0, repeat=2, use_cache=True)
    prefix = torch.full((6, 1), 1)
    for index in (torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([5, 0, 3, 3, 1]), torch.tensor([4, 4, 0])):
        a, b = lean.step(prefix), ref.step(prefix)
        assert torch.allclose(a, b, atol=1e-5)
        lean.reorder(index)
        ref.reorder(index)
        prefix = torch.cat([prefix[index], a[index].argmax(-1, keepdim=True)], 1)
    assert torch.allclose(lean.step(prefix), ref.step(prefix), atol=1e-5)


def test_kv_cache_reorder_into_spares_equals_index_select():
    g = torch.Generator().manual_seed(0)
    cache, ref_k, ref_v = KVCache(), None, None
    for step, index in enumerate([None, [1, 1, 0, 2], [3, 2, 1, 0], [0, 2], [1, 0, 1], [2, 2, 0]]):
        n = 3 if ref_k is None else ref_k.size(0)
        k, v = torch.randn(n, 2, 1, 4, generator=g), torch.randn(n, 2, 1, 4, generator=g)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], 2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], 2)
        got_k, got_v = cache.append(k, v)
        assert torch.equal(got_k, ref_k) and torch.equal(got_v, ref_v)
        if index is not None:
            index = torch.tensor(index)
            cache.reorder(index)
            ref_k, ref_v = ref_k[index], ref_v[index]
            assert torch.equal(cache.k, ref_k) and torch.equal(cache.v, ref_v)


def test_few_query_attention_equals_torchs_kernel_with_either_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, n, 8, generator=g) for n in (2, 6, 6))
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    assert torch.allclose(few_query_attention(q, k, v, mask), ref, atol=1e-6)
    assert torch.allclose(few_query_attention(q, k, v, additive), ref, atol=1e-6)
    assert torch.allclose(few_query_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-6)


def test_under_cpu_autocast_the_prepacked_products_give_way_to_autocasts_own():
    # an evaluation inside a bf16 training step decodes under autocast: inputs arrive in bf16
    lin = torch.nn.Linear(32, 40)
    p = inference.Packed(True, lin)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.randn(3, 32)
        assert torch.allclose(p(x).float(), lin(x).float(), atol=1e-6)
        assert torch.allclose(p(x.bfloat16()).float(), lin(x.bfloat16()).float(), atol=1e-6)


def test_batches_sharing_one_decodings_buffers_give_the_paper_paths_hypotheses():
    """Issue 37: the batches of one decoding take their self-attention buffers from one pool (the weights'
    `buffers`), each from where the batch before left them (larger, written over); every batch still gets the
    paper path's hypotheses, and the buffers go back to the pool when its search is done."""
    model = _model()
    with torch.no_grad():
        model.tgt_embed.weight[2] *= 0.0  # EOS (tied generator row) never likely: hypotheses run past 32 positions
    weights = model.inference_weights()
    for batch, seed in ((32, 5), (1, 6), (7, 7), (32, 8)):
        src = _src(batch, seed)
        got = beam_search(model, src, 1, 2, 0, 4, 0.6, max_len_offset=40, weights=weights)
        want = beam_search(model, src, 1, 2, 0, 4, 0.6, max_len_offset=40, use_cache=False)
        assert torch.equal(got, want)
        assert got.size(1) > 32  # past the buffer's second doubling
        assert len(weights.buffers) >= 2  # given back: the next batch reuses them


def test_a_decoding_inside_inference_mode_and_one_outside_share_the_weights_pool():
    """Buffers made under torch.inference_mode cannot be written outside it: the pool hands them out only there."""
    model = _model()
    weights = model.inference_weights()
    src = _src(5, 9)
    with torch.inference_mode():
        inside = beam_search(model, src, 1, 2, 0, 4, 0.6, max_len_offset=20, weights=weights)
    outside = beam_search(model, src, 1, 2, 0, 4, 0.6, max_len_offset=20, weights=weights)
    with torch.inference_mode():
        again = beam_search(model, src, 1, 2, 0, 4, 0.6, max_len_offset=20, weights=weights)
    assert torch.equal(inside, outside) and torch.equal(inside, again)


@pytest.mark.parametrize("kernel", ["fused", "matmul"])
def test_step_attention_takes_the_kernel_measured_for_few_rows_and_the_products_for_many(monkeypatch, kernel):
    """step_attention: at fewer than MANY_FROM query rows, torch's fused kernel where it measured faster (forced
    here both ways), else the batched products; at many rows always the products. Either way eq. (1) as the paper
    path writes it out (model.attention.scaled_dot_product_attention), with a boolean or an additive mask."""
    from transformer_min.core.speed import MANY_FROM
    from transformer_min.model import attention

    monkeypatch.setattr(attention, "few_query_kernel", lambda *a: kernel)
    fused = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: fused.append(1) or real(*a, **kw))
    g = torch.Generator().manual_seed(0)
    for B, H, rows in ((1, 4, 4), (3, 2, 4), (MANY_FROM, 4, 1), (8, 2, 4)):  # q (B, H, rows, 8): B * rows query rows
        q, k, v = torch.randn(B, H, rows, 8, generator=g), torch.randn(B, H, 6, 8, generator=g), torch.randn(
            B, H, 6, 8, generator=g)
        mask = torch.ones(B, 1, 1, 6, dtype=torch.bool)
        mask[-1, ..., 4:] = False
        additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        want, _ = attention.scaled_dot_product_attention(q, k, v, mask)
        fused.clear()
        for m in (mask, additive):
            assert torch.allclose(attention.step_attention(q, k, v, m), want, atol=1e-6)
        few = B * rows < MANY_FROM
        assert len(fused) == (2 if few and kernel == "fused" else 0), (B, rows, kernel, len(fused))
