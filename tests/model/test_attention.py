"""attention.py: eq. (1) and section 3.2.2 against the NumPy reference, torch's own module and gradcheck."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from transformer_min.model import reference
from transformer_min.model.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_min.model.kv_cache import KVCache
from transformer_min.model.masks import causal_mask

B, H, LQ, LK, D_HEAD = 2, 3, 5, 7, 8  # B != H so a (B, Lq, Lk) mask cannot pass as (H, Lq, Lk)
D_MODEL, HEADS = 32, 4
F64_ATOL = 1e-12  # float64 inputs keep float64 precision through the softmax


def qkv(dtype=torch.float64, lq=LQ, lk=LK, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, lq, D_HEAD, generator=g, dtype=torch.float64) * scale
    k = torch.randn(B, H, lk, D_HEAD, generator=g, dtype=torch.float64) * scale
    v = torch.randn(B, H, lk, D_HEAD, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def random_mask(shape, seed=1) -> torch.Tensor:
    """A random boolean mask that keeps key 0 for every query (no fully masked rows)."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) < 0.6
    m[..., 0] = True
    return m


# (name, mask shape, how the mask aligns to (B, H, Lq, Lk) for the NumPy reference)
MASK_FORMS = [
    ("2d (Lq, Lk)", (LQ, LK), lambda m: m),
    ("3d (B, Lq, Lk)", (B, LQ, LK), lambda m: m[:, None]),
    ("4d (B, 1, Lq, Lk)", (B, 1, LQ, LK), lambda m: m),
    ("4d (B, H, Lq, Lk)", (B, H, LQ, LK), lambda m: m),
    ("padding (B, 1, 1, Lk)", (B, 1, 1, LK), lambda m: m),
]


def test_unmasked_matches_numpy_reference():
    q, k, v = qkv()
    out, w = scaled_dot_product_attention(q, k, v)
    ref_out, ref_w = reference.attention(q.numpy(), k.numpy(), v.numpy())
    np.testing.assert_allclose(out.numpy(), ref_out, atol=F64_ATOL)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=F64_ATOL)
    assert out.shape == (B, H, LQ, D_HEAD) and w.shape == (B, H, LQ, LK)  # cross: Lq != Lk
    np.testing.assert_allclose(w.sum(-1).numpy(), 1.0, atol=F64_ATOL)  # softmax over the key axis


@pytest.mark.parametrize("name,shape,align", MASK_FORMS, ids=[f[0] for f in MASK_FORMS])
def test_every_mask_form_matches_numpy_reference(name, shape, align):
    q, k, v = qkv()
    mask = random_mask(shape)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_w = reference.attention(q.numpy(), k.numpy(), v.numpy(), align(mask).numpy())
    np.testing.assert_allclose(out.numpy(), ref_out, atol=F64_ATOL)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=F64_ATOL)


def test_float64_inputs_keep_float64_precision():
    q, k, v = qkv()
    mask = random_mask((B, 1, 1, LK))
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_w = reference.attention(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-12)


def test_float32_matches_numpy_reference():
    q, k, v = qkv(torch.float32)
    mask = random_mask((B, 1, 1, LK))
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_w = reference.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), mask.numpy())
    np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-6)


def test_masked_weights_exactly_zero():
    q, k, v = qkv(torch.float32, scale=4.0)  # large logits
    mask = random_mask((B, H, LQ, LK), seed=5)
    _, w = scaled_dot_product_attention(q, k, v, mask)
    assert int((w[~mask.expand_as(w)] != 0).sum()) == 0
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, LQ), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_row_is_finite_zero(dtype):
    q, k, v = qkv(dtype)
    mask = random_mask((LQ, LK))
    mask[2] = False  # query 2 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
    assert torch.equal(w[:, :, 2], torch.zeros_like(w[:, :, 2]))
    other = torch.ones(LQ, dtype=torch.bool)
    other[2] = False
    torch.testing.assert_close(w[:, :, other].float().sum(-1), torch.ones(B, H, LQ - 1), atol=2e-2, rtol=0)


def test_fully_masked_row_matches_reference_convention():
    q, k, v = qkv()
    mask = random_mask((B, 1, LQ, LK))
    mask[1, 0, 3] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_w = reference.attention(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    np.testing.assert_allclose(out.numpy(), ref_out, atol=F64_ATOL)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=F64_ATOL)


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "mask"])
def test_gradcheck_equation_1(masked):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    mask = random_mask((1, 1, 3, 5), seed=4) if masked else None

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)  # output and weights

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-5, fast_mode=True)


def test_gradients_match_float64_transcription():
    """Backward of eq. (1) against autograd through the formula written out in float64."""
    g = torch.Generator().manual_seed(3)
    leaves = [torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64) for n in (3, 5, 5)]
    mask = random_mask((1, 1, 3, 5), seed=4)
    upstream = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)

    def grads(fn):
        q, k, v = (t.clone().requires_grad_(True) for t in leaves)
        (fn(q, k, v) * upstream).sum().backward()
        return q.grad, k.grad, v.grad

    def formula(q, k, v):
        scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))  # sqrt(d_k) = 2
        return torch.softmax(scores, dim=-1) @ v

    for ours, want in zip(grads(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0]), grads(formula)):
        torch.testing.assert_close(ours, want, atol=1e-6, rtol=0)


def test_non_boolean_mask_raises_type_error():
    q, k, v = qkv(torch.float32)
    float_mask = torch.ones(LQ, LK)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, float_mask)
    mha = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(2, 4, D_MODEL)
    for need_weights in (True, False):
        with pytest.raises(TypeError, match="boolean"):
            mha(query=x, key=x, value=x, mask=torch.ones(4, 4, dtype=torch.long), need_weights=need_weights)


# --------------------------------------------------------------------------------------------
# MultiHeadAttention (section 3.2.2)
# --------------------------------------------------------------------------------------------

def make_mha(dtype=torch.float32) -> MultiHeadAttention:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, HEADS).eval().to(dtype)
    with torch.no_grad():  # non-zero biases so bias handling is compared too
        for lin in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            lin.bias.normal_()
    return mha


def inputs(t=5, s=7, dtype=torch.float32):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, t, D_MODEL, generator=g, dtype=torch.float64).to(dtype)
    mem = torch.randn(2, s, D_MODEL, generator=g, dtype=torch.float64).to(dtype)
    keep = torch.ones(2, s, dtype=torch.bool)
    keep[1, -3:] = False
    return x, mem, keep


def torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.weight.copy_(mha.w_o.weight)
        ref.out_proj.bias.copy_(mha.w_o.bias)
    return ref


def fast_and_paper_cases():
    x, mem, keep = inputs()
    t = x.shape[1]
    g = torch.Generator().manual_seed(2)
    per_query = torch.rand(2, t, mem.shape[1], generator=g) < 0.7
    per_query[..., 0] = True
    return {
        "self-unmasked": (x, x, None),
        "self-causal": (x, x, causal_mask(t)),
        "self-causal-4d": (x, x, causal_mask(t)[None, None].expand(2, 1, t, t)),
        "cross-padding": (x, mem, keep[:, None, None, :]),
        "cross-3d-mask": (x, mem, per_query),
        "cross-(B,H,T,S)": (x, mem, per_query[:, None].expand(2, HEADS, t, mem.shape[1])),
    }


@pytest.mark.parametrize("case", list(fast_and_paper_cases()))
def test_paper_path_equals_fast_path(case):
    query, kv, mask = fast_and_paper_cases()[case]
    mha = make_mha()
    with torch.no_grad():
        slow, w = mha(query=query, key=kv, value=kv, mask=mask, need_weights=True)
        fast, none = mha(query=query, key=kv, value=kv, mask=mask, need_weights=False)
    assert none is None
    assert w.shape == (2, HEADS, query.shape[1], kv.shape[1])  # per-head weights (B, H, Lq, Lk)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)


def test_self_attention_matches_torch_multihead_attention():
    mha = make_mha()
    ref = torch_mha(mha)
    _, x, keep = inputs(s=7)  # 7 positions, the last 3 of sentence 1 padded
    with torch.no_grad():
        ours, w = mha(query=x, key=x, value=x, mask=keep[:, None, None, :], need_weights=True)
        # torch's boolean key_padding_mask means True = ignore: the opposite of our convention.
        theirs, tw = ref(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, tw, atol=1e-6, rtol=0)


def test_causal_cross_attention_matches_torch_multihead_attention():
    mha = make_mha()
    ref = torch_mha(mha)
    x, mem, keep = inputs(t=5, s=7)
    with torch.no_grad():
        ours, w = mha(query=x, key=mem, value=mem, mask=keep[:, None, None, :], need_weights=True)
        theirs, tw = ref(x, mem, mem, key_padding_mask=~keep, need_weights=True, average_attn_weights=True)
        ours_c, _ = mha(query=x, key=x, value=x, mask=causal_mask(5))
        theirs_c, _ = ref(x, x, x, attn_mask=~causal_mask(5), need_weights=False)
    assert ours.shape == (2, 5, D_MODEL) and w.shape == (2, HEADS, 5, 7)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(w.mean(1), tw, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_c, theirs_c, atol=1e-5, rtol=0)


def test_matches_numpy_multi_head_reference():
    mha = make_mha(torch.float64)
    x, mem, keep = inputs(dtype=torch.float64)
    p = {n: t.detach().numpy() for n, t in mha.named_parameters()}
    mask = keep[:, None, None, :]
    with torch.no_grad():
        ours, w = mha(query=x, key=mem, value=mem, mask=mask, need_weights=True)
    ref_out, ref_w = reference.multi_head_attention(
        x.numpy(), mem.numpy(), mem.numpy(),
        p["w_q.weight"].T, p["w_k.weight"].T, p["w_v.weight"].T, p["w_o.weight"].T,
        p["w_q.bias"], p["w_k.bias"], p["w_v.bias"], p["w_o.bias"], num_heads=HEADS, mask=mask.numpy())
    np.testing.assert_allclose(ours.numpy(), ref_out, atol=F64_ATOL)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=F64_ATOL)


@pytest.mark.parametrize("need_weights", [False, True])
def test_kv_cache_incremental_self_attention_equals_full(need_weights):
    mha = make_mha()
    x, _, _ = inputs(t=6)
    T = x.shape[1]
    with torch.no_grad():
        full, full_w = mha(query=x, key=x, value=x, mask=causal_mask(T), need_weights=need_weights)
        cache = KVCache()
        steps = []
        for t in range(T):  # position t sees the cached keys 0..t-1 and itself: causal by construction
            xt = x[:, t : t + 1]
            out, w = mha(query=xt, key=xt, value=xt, need_weights=need_weights, cache=cache)
            steps.append(out)
            assert cache.k.shape == (2, HEADS, t + 1, D_MODEL // HEADS)
            if need_weights:
                torch.testing.assert_close(w[:, :, 0], full_w[:, :, t, : t + 1], atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_static_cross_attention_projects_once():
    mha = make_mha()
    x, mem, keep = inputs()
    mask = keep[:, None, None, :]
    with torch.no_grad():
        full, _ = mha(query=x, key=mem, value=mem, mask=mask)
        cache = KVCache()
        steps = []
        for t in range(x.shape[1]):
            out, _ = mha(query=x[:, t : t + 1], key=mem, value=mem, mask=mask, cache=cache, static_kv=True)
            if t == 0:
                k0 = cache.k_buf
            assert cache.k_buf is k0  # filled once, then reused
            steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_reorder_selects_batch_rows():
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    cache = KVCache(k.clone(), v.clone())
    index = torch.tensor([2, 2, 0])
    cache.reorder(index)
    assert torch.equal(cache.k, k[[2, 2, 0]]) and torch.equal(cache.v, v[[2, 2, 0]])
    empty = KVCache()
    empty.reorder(index)  # nothing cached yet: a no-op
    assert empty.k is None


def test_eval_after_a_fused_optimizer_step_sees_the_new_weights():
    """Regression: Adam(fused=True) updates weights without bumping their version counter; the module
    keeps nothing derived from its weights, so evaluation between steps sees the new ones (compared with
    a fresh module loaded from the state dict)."""
    mha = make_mha()
    opt = torch.optim.Adam(mha.parameters(), lr=0.1, fused=True)
    x = torch.randn(2, 5, D_MODEL)
    mha.eval()
    with torch.no_grad():
        before, _ = mha(query=x, key=x, value=x)
    mha.train()
    mha(query=x, key=x, value=x)[0].sum().backward()
    opt.step()
    mha.eval()
    fresh = MultiHeadAttention(D_MODEL, HEADS).eval()
    fresh.load_state_dict(mha.state_dict())
    with torch.no_grad():
        after, _ = mha(query=x, key=x, value=x)
        want, _ = fresh(query=x, key=x, value=x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, want, atol=1e-6, rtol=0)


def test_the_module_has_no_optimizer_knowledge():
    """Issue 14: no train() override, nothing cached between calls under a private tensor version."""
    mha = make_mha()
    assert type(mha).train is nn.Module.train
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        mha(query=x, key=x, value=x)
    assert set(vars(mha)) - set(vars(MultiHeadAttention(D_MODEL, HEADS))) == set()


def test_build_model_fixes_the_kernel_once_from_the_machine_choice(monkeypatch):
    """build_model asks hardware.attention_kernel once, for the device and the precision the config
    resolves to, and every attention keeps that choice; `kernel=` overrides it."""
    import dataclasses

    import transformer_min.model.transformer as transformer
    from transformer_min.core.config import Config, ModelConfig, TrainConfig, VocabConfig

    asked = []

    def choose(device, dtype):
        asked.append((device, dtype))
        return "matmul"

    monkeypatch.setattr(transformer, "attention_kernel", choose)
    cfg = Config(model=ModelConfig(d_model=16, num_heads=4, d_ff=24, num_layers=1, max_len=8),
                 vocab=VocabConfig(src_size=10, tgt_size=10), train=TrainConfig(device="cpu", precision="bf16"))
    model = transformer.build_model(cfg)
    kernels = {m.kernel for m in model.modules() if isinstance(m, MultiHeadAttention)}
    assert asked == [("cpu", torch.bfloat16)] and kernels == {"matmul"}
    fp32 = dataclasses.replace(cfg, train=TrainConfig(device="cpu", precision="fp32"))
    transformer.build_model(fp32)
    assert asked[-1] == ("cpu", torch.float32)
    override = transformer.build_model(cfg, kernel="fused")
    assert {m.kernel for m in override.modules() if isinstance(m, MultiHeadAttention)} == {"fused"}
    assert len(asked) == 2
    with pytest.raises(ValueError, match="kernel"):
        MultiHeadAttention(D_MODEL, HEADS, kernel="flash")


@pytest.mark.parametrize("case", ["self-causal", "cross-padding", "cross-3d-mask"])
def test_bf16_cpu_takes_the_matmul_path_and_agrees_with_sdpa(case, monkeypatch):
    """Where the machine chose the matmuls for bf16 on the CPU, the fast path is eq. (1) written out; it must equal the
    fused kernel's answer (bf16 tolerance) and the fp32 result, and never call the fused kernel."""
    query, kv, mask = fast_and_paper_cases()[case]
    mha = make_mha()
    mha.kernel = "matmul"  # as build_model chooses on an AMX CPU
    with torch.no_grad():
        want32, _ = mha(query=query, key=kv, value=kv, mask=mask, need_weights=False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q = mha.split_heads(mha.w_q(query), mha.d_k)
            k, v = mha.project_kv(kv, kv)
            m = mask if mask is None or mask.dim() != 3 else mask[:, None]
            fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
            fused = mha.w_o(fused.transpose(1, 2).reshape(query.shape[0], query.shape[1], -1))

            def refuse(*args, **kwargs):
                raise AssertionError("the fused kernel ran under bf16 on the CPU")

            monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", refuse)
            got, none = mha(query=query, key=kv, value=kv, mask=mask, need_weights=False)
    assert none is None and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), fused.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), want32, atol=3e-2, rtol=3e-2)
