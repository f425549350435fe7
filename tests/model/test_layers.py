"""layers.py: encoder and decoder layers (section 3.1) against torch's own layers with copied weights."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from transformer_min.model.build import decoder_layer, encoder_layer
from transformer_min.model.kv_cache import LayerCache
from transformer_min.model.masks import causal_mask

D_MODEL, HEADS, D_FF = 32, 4, 64
S, T = 7, 5  # source and target lengths differ (cross-attention Lq != Lk)


def copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


def copy_layer(ours, theirs) -> None:
    """Our layer's weights into nn.TransformerEncoderLayer / nn.TransformerDecoderLayer."""
    with torch.no_grad():
        copy_attention(ours.self_attn, theirs.self_attn)
        if hasattr(ours, "cross_attn"):
            copy_attention(ours.cross_attn, theirs.multihead_attn)
        theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
        theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(ours, name):
                getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())


def randomise(module: nn.Module) -> None:
    """Random biases and LayerNorm affine parameters, so every parameter is really compared."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if "norm" in name and name.endswith("weight") else 0.0))


def data():
    g = torch.Generator().manual_seed(0)
    src = torch.randn(2, S, D_MODEL, generator=g)
    tgt = torch.randn(2, T, D_MODEL, generator=g)
    src_keep = torch.ones(2, S, dtype=torch.bool)
    src_keep[1, -3:] = False  # sentence 1: three padded source positions
    tgt_keep = torch.ones(2, T, dtype=torch.bool)
    tgt_keep[0, -2:] = False  # sentence 0: two padded target positions
    return src, tgt, src_keep, tgt_keep


def layers(norm_first: bool):
    torch.manual_seed(0)
    enc = encoder_layer(D_MODEL, HEADS, D_FF, dropout=0.0, norm_first=norm_first).eval()
    dec = decoder_layer(D_MODEL, HEADS, D_FF, dropout=0.0, norm_first=norm_first).eval()
    randomise(enc)
    randomise(dec)
    t_enc = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True,
                                       norm_first=norm_first).eval()
    t_dec = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True,
                                       norm_first=norm_first).eval()
    copy_layer(enc, t_enc)
    copy_layer(dec, t_dec)
    return enc, dec, t_enc, t_dec


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm (paper)", "pre-norm"])
def test_encoder_layer_matches_torch(norm_first):
    enc, _, t_enc, _ = layers(norm_first)
    src, _, src_keep, _ = data()
    # With autograd on, torch takes its Python path and computes the padded positions too
    ours, w = enc(src, src_keep[:, None, None, :], need_weights=True)
    theirs = t_enc(src, src_key_padding_mask=~src_keep)  # torch: True = ignore
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert w.shape == (2, HEADS, S, S)
    assert w[1, :, :, -3:].abs().max() == 0  # padded keys get weight 0
    # Under no_grad torch may take its fused fast path; the real positions must still agree
    with torch.no_grad():
        ours_ng, _ = enc(src, src_keep[:, None, None, :])
        theirs_ng = t_enc(src, src_key_padding_mask=~src_keep)
    torch.testing.assert_close(ours_ng[src_keep], theirs_ng[src_keep], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm (paper)", "pre-norm"])
def test_decoder_layer_matches_torch(norm_first):
    _, dec, _, t_dec = layers(norm_first)
    memory, tgt, src_keep, tgt_keep = data()
    tgt_mask = tgt_keep[:, None, None, :] & causal_mask(T)  # (B, 1, T, T)
    with torch.no_grad():
        ours, sw, cw = dec(tgt, memory, src_keep[:, None, None, :], tgt_mask, need_weights=True)
        theirs = t_dec(tgt, memory, tgt_mask=~causal_mask(T), tgt_key_padding_mask=~tgt_keep,
                       memory_key_padding_mask=~src_keep)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert sw.shape == (2, HEADS, T, T) and cw.shape == (2, HEADS, T, S)
    assert sw[..., torch.ones(T, T, dtype=torch.bool).triu(1)].abs().max() == 0  # causal
    assert cw[1, :, :, -3:].abs().max() == 0  # padded source keys


def test_post_norm_output_is_normalised():
    """3.1 post-norm: the layer output is LayerNorm(...) itself (per-position mean 0, std 1 at unit gain)."""
    torch.manual_seed(0)
    enc = encoder_layer(D_MODEL, HEADS, D_FF, dropout=0.0).eval()  # LayerNorm gain 1, bias 0
    src, _, _, _ = data()
    with torch.no_grad():
        out, _ = enc(src * 5 + 3)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, S), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, S), atol=1e-3, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_with_cache_equals_full(norm_first):
    _, dec, _, _ = layers(norm_first)
    memory, tgt, src_keep, _ = data()
    src_mask = src_keep[:, None, None, :]
    with torch.no_grad():
        full, full_sw, _ = dec(tgt, memory, src_mask, causal_mask(T), need_weights=True)
        cache = LayerCache()
        steps = []
        for t in range(T):
            out, sw, _ = dec(tgt[:, t : t + 1], memory, src_mask, None, need_weights=True, cache=cache)
            torch.testing.assert_close(sw[:, :, 0], full_sw[:, :, t, : t + 1], atol=1e-6, rtol=0)
            steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.self_kv.k.shape[2] == T and cache.cross_kv.k.shape[2] == S


def test_layer_cache_reorder():
    _, dec, _, _ = layers(False)
    memory, tgt, src_keep, _ = data()
    cache = LayerCache()
    with torch.no_grad():
        dec(tgt[:, :2], memory, src_keep[:, None, None, :], causal_mask(2), cache=cache)
    k_self, k_cross = cache.self_kv.k.clone(), cache.cross_kv.k.clone()
    cache.reorder(torch.tensor([1, 1]))
    assert torch.equal(cache.self_kv.k, k_self[[1, 1]]) and torch.equal(cache.cross_kv.k, k_cross[[1, 1]])


def test_residual_dropout_is_active_in_train_mode():
    """5.4 residual dropout: with P_drop > 0 training mode is stochastic, eval mode is not."""
    torch.manual_seed(0)
    enc = encoder_layer(D_MODEL, HEADS, D_FF, dropout=0.5)
    src, _, _, _ = data()
    with torch.no_grad():
        a, b = enc.train()(src)[0], enc(src)[0]
        c, d = enc.eval()(src)[0], enc(src)[0]
    assert not torch.allclose(a, b)
    assert torch.equal(c, d)


def test_debug_log_names_sublayer_shapes(caplog):
    torch.manual_seed(0)
    enc = encoder_layer(D_MODEL, HEADS, D_FF, dropout=0.0).eval()
    src, _, _, _ = data()
    with caplog.at_level(logging.DEBUG, logger="transformer_min.model.layers"), torch.no_grad():
        enc(src)
    text = caplog.text
    assert "pass 1 encoder_layer.self_attn" in text and f"(2, {S}, {D_MODEL})" in text


def test_start_step_keeps_the_encoder_keys_and_values_foldable_into_one_batch_axis():
    """The decoding step's encoder-decoder K, V: the projection's values, laid out so (N, H) fold into the batch axis
    of eq. (1)'s products without a copy at every step (issue 37)."""
    torch.manual_seed(0)
    layer = decoder_layer(D_MODEL, HEADS, D_FF, dropout=0.0).eval()
    memory = torch.randn(3, S, D_MODEL)
    cache = layer.start_step(memory)
    want_k, want_v = layer.cross_attn.project_kv(memory, memory)
    for got, want in ((cache.cross_k, want_k), (cache.cross_v, want_v)):
        assert torch.equal(got, want) and got.shape == (3, HEADS, S, D_MODEL // HEADS)
        assert got.is_contiguous() and not want.is_contiguous()  # the heads' view alone would not fold
        assert got.flatten(0, 1).data_ptr() == got.data_ptr()  # a view: no copy when folded
