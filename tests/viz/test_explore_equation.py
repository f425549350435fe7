"""Eq. (1) step by step (section 3.2.1) against NumPy written out independently, and the model view against
the model's own attention weights and outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_min.core.config import AttentionDemoConfig
from transformer_min.viz.explore.equation import demo_equation, demo_inputs
from transformer_min.viz.explore.sentence import attention_module, decode, model_equation
from transformer_min.viz.explore.tensors import ExploreInputError, unpack

DEMO = AttentionDemoConfig(d_model=64, num_heads=4, seq_len=6, seed=42)


def numpy_pe(length: int, d: int) -> np.ndarray:
    """Section 3.5, written out: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same)."""
    pe = np.zeros((length, d))
    for pos in range(length):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("heads,scale,causal", [(4, True, False), (1, False, True), (8, True, True), (2, False, False)])
def test_demo_steps_match_numpy(heads, scale, causal):
    r = demo_equation(DEMO, 6, heads, scale, causal)
    x, _, p = demo_inputs(DEMO, 6)  # the seeded inputs; everything after them is recomputed here
    x = x.double().numpy() + numpy_pe(6, 64)
    wq, wk, wv, wo = (w.double().numpy() for w in (p.w_q, p.w_k, p.w_v, p.w_o))
    np.testing.assert_allclose(unpack(r["shared"]["PE"]), numpy_pe(6, 64), atol=1e-6)
    q, k, v, dk = x @ wq, x @ wk, x @ wv, 64 // heads
    mask = np.tril(np.ones((6, 6))) if causal else np.ones((6, 6))
    outs = []
    for i, h in enumerate(r["combo"]["heads"]):
        cols = slice(i * dk, (i + 1) * dk)
        scores = q[:, cols] @ k[:, cols].T
        scaled = scores / math.sqrt(dk) if scale else scores
        w = numpy_softmax(np.where(mask > 0, scaled, -np.inf))
        np.testing.assert_allclose(unpack(h["scores"]), scores, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(unpack(h["scaled"]), scaled, rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(unpack(h["mask"]), mask)
        assert np.all(np.isneginf(unpack(h["masked"])[mask == 0]))
        np.testing.assert_allclose(unpack(h["weights"]), w, atol=1e-5)
        np.testing.assert_allclose(unpack(h["out"]), w @ v[:, cols], atol=1e-4)
        outs.append(w @ v[:, cols])
    np.testing.assert_allclose(unpack(r["combo"]["concat"]), np.concatenate(outs, -1), atol=1e-4)
    np.testing.assert_allclose(unpack(r["combo"]["output"]), np.concatenate(outs, -1) @ wo, atol=1e-4)


def test_without_scaling_the_softmax_saturates():
    """Footnote 4: with d_k = 512 (one head) the unscaled dot products are large and the softmax near one-hot."""
    cfg = AttentionDemoConfig(d_model=512, num_heads=8, seq_len=6, seed=42)
    scaled = demo_equation(cfg, 6, 1, True, False)["combo"]["saturation"]
    unscaled = demo_equation(cfg, 6, 1, False, False)["combo"]["saturation"]
    assert unscaled > 0.95 and scaled < 0.9 and unscaled > scaled


def test_a_longer_demo_keeps_the_first_rows():
    a, b = demo_equation(DEMO, 4, 4, True, False), demo_equation(DEMO, 8, 4, True, False)
    np.testing.assert_array_equal(unpack(b["shared"]["X"])[:4], unpack(a["shared"]["X"]))


@pytest.mark.parametrize("seq_len,heads", [(5, 4), (6, 3), (6, 16)])
def test_demo_refuses_other_toggles(seq_len, heads):
    with pytest.raises(ExploreInputError, match="choose one of"):
        demo_equation(DEMO, seq_len, heads, True, False)


@pytest.mark.parametrize("kind,layer", [("encoder", 0), ("decoder_self", 1), ("cross", 1)])
def test_model_steps_are_the_models_own_attention(reverse_session, kind, layer):
    """The page's softmax for each head equals the weights the model returns, and Concat W^O equals the
    module's output for the same inputs (its mask: causal in the decoder's self-attention)."""
    s, text = reverse_session, "3 4 5 6 7"
    r = model_equation(s, text, kind, layer, True, kind == "decoder_self")
    src, tgt = decode(s, s.vocab.encode(text))
    with torch.no_grad():
        _, att = s.model(src, tgt, return_attention=True)
    returned = {"encoder": att.encoder, "decoder_self": att.decoder_self, "cross": att.cross}[kind][layer][0]
    for i, h in enumerate(r["combo"]["heads"]):
        np.testing.assert_allclose(unpack(h["weights"]), returned[i].numpy(), atol=1e-5)
    x, mem = torch.from_numpy(unpack(r["shared"]["X"]).copy())[None], r["shared"].get("X_kv")
    kv = x if mem is None else torch.from_numpy(unpack(mem).copy())[None]
    mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril() if kind == "decoder_self" else None
    with torch.no_grad():
        out, _ = attention_module(s.model, kind, layer)(query=x, key=kv, value=kv, mask=mask)
    np.testing.assert_allclose(unpack(r["combo"]["output"]), out[0].numpy(), atol=1e-5)
    assert r["q_labels"][0] == ("3" if kind == "encoder" else "<s>")


def test_model_view_refuses_a_causal_cross_attention_and_a_missing_layer(reverse_session):
    with pytest.raises(ExploreInputError, match="causal"):
        model_equation(reverse_session, "3 4 5", "cross", 0, True, True)
    with pytest.raises(ExploreInputError, match="layers 0..1"):
        model_equation(reverse_session, "3 4 5", "encoder", 2, True, False)
