"""model.positional = "rope" and "relative": rotary embeddings (Su et al., 2021) and relative position
representations (Shaw et al., 2018), against NumPy transcriptions of their formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model import reference
from transformer_min.model.embeddings import NoPositionalEncoding
from transformer_min.model.kv_cache import KVCache
from transformer_min.model.masks import causal_mask
from transformer_min.model.relative import RelativeAttention, relative_buckets
from transformer_min.model.rotary import RotaryAttention, rotary_angles, rotate_pairs
from transformer_min.model.transformer import build_model
from transformer_min.model.variants import POSITIONAL_VARIANTS


def test_rotation_matches_roformer_eq_34_elementwise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64)
    got = rotate_pairs(x, rotary_angles(5, 6, 8))
    np.testing.assert_allclose(got.numpy(), reference.rotary(x.numpy(), np.arange(5, 11)), atol=1e-6)


def test_rotary_scores_depend_only_on_the_offset_and_keep_norms():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)

    def score(m: int, n: int) -> float:
        qm = rotate_pairs(q, rotary_angles(m, 1, 16))
        kn = rotate_pairs(k, rotary_angles(n, 1, 16))
        return float((qm * kn).sum())

    for m, n in ((3, 1), (7, 7), (2, 9)):
        for s in (1, 13, 100):
            assert score(m + s, n + s) == pytest.approx(score(m, n), abs=1e-5)
    rotated = rotate_pairs(q, rotary_angles(37, 1, 16))
    assert float(rotated.norm()) == pytest.approx(float(q.norm()), rel=1e-6)
    assert score(5, 1) != pytest.approx(score(1, 5), abs=1e-3)  # the direction of the offset matters


@pytest.mark.parametrize("causal", [False, True])
def test_relative_attention_equals_shaw_eq_3_4_with_loops(causal):
    torch.manual_seed(0)
    L, D, H, clip = 7, 12, 3, 2
    mha = RelativeAttention(D, H, d_k=4, d_v=5, bias=False, relative_clip=clip).double().eval()
    x = torch.randn(1, L, D, dtype=torch.float64)
    mask = causal_mask(L) if causal else None
    with torch.no_grad():
        got, _ = mha(query=x, key=x, value=x, mask=mask)
    p = {k: v.numpy() for k, v in mha.state_dict().items()}
    want = reference.relative_attention(x[0].numpy(), p["w_q.weight"].T, p["w_k.weight"].T, p["w_v.weight"].T,
                                        p["w_o.weight"].T, p["rel_k"], p["rel_v"], H, clip,
                                        None if mask is None else mask.numpy())
    np.testing.assert_allclose(got[0].numpy(), want, atol=1e-10)


def test_relative_buckets_clip_beyond_k():
    idx = relative_buckets(4, 9, clip=2, offset=3)  # queries at 3..6, keys at 0..8
    want = np.clip(np.arange(9)[None, :] - np.arange(3, 7)[:, None], -2, 2) + 2
    np.testing.assert_array_equal(idx.numpy(), want)


def variant_model(positional: str, kernel: str = "fused"):
    torch.manual_seed(0)
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=48, num_layers=2, dropout=0.0, max_len=40,
                                   positional=positional, relative_clip=3),
                 vocab=VocabConfig(src_size=20, tgt_size=20))
    return build_model(cfg, kernel=kernel).eval()


@pytest.mark.parametrize("positional", ["rope", "relative"])
def test_variant_parts_come_from_the_registry(positional):
    model = variant_model(positional)
    want = POSITIONAL_VARIANTS[positional].self_attention
    for layer in (*model.encoder.layers, *model.decoder.layers):
        assert type(layer.self_attn) is want
    assert all(type(layer.cross_attn).__name__ == "MultiHeadAttention" for layer in model.decoder.layers)
    assert isinstance(model.src_pos, NoPositionalEncoding) and isinstance(model.tgt_pos, NoPositionalEncoding)
    assert not list(model.src_pos.parameters()) and not list(model.src_pos.buffers())


@pytest.mark.parametrize("kernel", ["fused", "matmul"])
@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "relative"])
def test_cached_self_attention_equals_uncached(positional, kernel):
    """One position at a time through a KV cache (positions offset by the cache length) gives the
    causal full-sequence result."""
    model = variant_model(positional, kernel)
    attn = model.decoder.layers[0].self_attn
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        full, _ = attn(query=x, key=x, value=x, mask=causal_mask(9))
        cache, steps = KVCache(), []
        for t in range(9):
            xt = x[:, t:t + 1]
            steps.append(attn(query=xt, key=xt, value=xt, cache=cache)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positional", ["rope", "relative"])
def test_variant_is_position_aware(positional):
    """Without any absolute encoding the model still sees order: swapping two source tokens changes the
    output (a bag-of-words encoder would not)."""
    model = variant_model(positional)
    src = torch.tensor([[5, 6, 7, 8, 9]])
    swapped = torch.tensor([[6, 5, 7, 8, 9]])
    tgt = torch.tensor([[1, 4, 4]])
    with torch.no_grad():
        assert not torch.allclose(model(src, tgt), model(swapped, tgt), atol=1e-4)


@pytest.mark.parametrize("positional", ["rope", "relative"])
def test_variant_trains_under_bf16_autocast(positional):
    """A few Adam steps on one fixed copy batch lower the loss, under CPU bf16 autocast (the lead's runs)."""
    model = variant_model(positional).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 20, (8, 6), generator=g)
    tgt_in = torch.cat([torch.ones(8, 1, dtype=torch.long), src], 1)
    tgt_out = torch.cat([src, torch.full((8, 1), 2)], 1)
    losses = []
    for _ in range(25):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 20), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_a_new_variant_is_one_class_and_one_registry_entry(monkeypatch):
    """The seam: a self-attention subclass and a registry entry are all build_model's parts need; layers.py and
    transformer.py are not touched (here: attention that sees positions as a bias growing with j - i)."""
    from transformer_min.model.attention import MultiHeadAttention
    from transformer_min.model.memory import count_model_values
    from transformer_min.model.variants import PositionalVariant

    class Tilted(MultiHeadAttention):
        config_fields = ("relative_clip",)  # reuses an existing config value as its option

        def __init__(self, *args, relative_clip: int = 16, **kwargs):
            super().__init__(*args, **kwargs)
            self.tilt = relative_clip

        def encode_positions(self, q, k, offset):
            pos = torch.arange(offset, offset + k.size(2), dtype=k.dtype)[:, None] / self.tilt  # (T, 1)
            return q, k + pos

    monkeypatch.setitem(POSITIONAL_VARIANTS, "tilted", PositionalVariant(NoPositionalEncoding, Tilted, "a test"))
    m = ModelConfig(d_model=16, num_heads=4, d_ff=24, num_layers=2, max_len=11, relative_clip=4)
    object.__setattr__(m, "positional", "tilted")  # a config value (the Literal in core/config.py) stands in
    vocab = VocabConfig(src_size=30, tgt_size=30)
    model = build_model(Config(model=m, vocab=vocab), kernel="matmul").eval()
    assert {type(layer.self_attn) for layer in (*model.encoder.layers, *model.decoder.layers)} == {Tilted}
    assert {layer.self_attn.tilt for layer in model.encoder.layers} == {4}
    real = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert count_model_values(m, vocab) == real
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[5, 6, 7]]), torch.tensor([[1, 5]]))).all()
