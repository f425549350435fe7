"""model.py: the whole Transformer (section 3), its parameter count (Table 3) and its properties."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from transformer_min.core.config import Config, ConfigError, ModelConfig, VocabConfig
from transformer_min.core.errors import ModelInputError
from transformer_min.model.memory import check_model_memory, count_model_values, estimate_model_bytes
from transformer_min.model.transformer import Transformer, build_model, count_parameters

V_TINY = 50


def tiny_config(**model) -> Config:
    base = dict(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=64)
    return Config(model=ModelConfig(**{**base, **model}), vocab=VocabConfig(src_size=V_TINY, tgt_size=V_TINY))


@pytest.fixture(scope="module")
def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return build_model(tiny_config()).eval()


def tokens(B: int, L: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V_TINY, (B, L), generator=g)  # ids 0-2 are pad, bos, eos


def paper_count(N=6, d=512, d_ff=2048, h=8, d_k=64, d_v=64, V=37000) -> int:
    """PAPER.md closed form for the faithful model."""
    p_att = 2 * d * h * d_k + d * h * d_v + h * d_v * d + (2 * h * d_k + h * d_v + d)
    p_ffn = 2 * d * d_ff + d_ff + d
    return N * (3 * p_att + 2 * p_ffn + 10 * d) + V * d


def meta_count(cfg: Config) -> int:
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        return count_parameters(build_model(cfg))


# (Table 3 row, model overrides, PAPER.md exact count at V = 37000)
TABLE_3 = [
    ("base", {}, 63_082_496),
    ("B d_k=16", dict(d_k=16, free_head_dims=True), 55_990_784),
    ("B d_k=32", dict(d_k=32, free_head_dims=True), 58_354_688),
    ("C N=2", dict(num_layers=2), 33_656_832),
    ("C N=4", dict(num_layers=4), 48_369_664),
    ("C N=8", dict(num_layers=8), 77_795_328),
    ("C d_model=256", dict(d_model=256), 26_834_944),
    ("C d_model=1024", dict(d_model=1024), 163_889_152),
    ("C d_ff=1024", dict(d_ff=1024), 50_487_296),
    ("C d_ff=4096", dict(d_ff=4096), 88_272_896),
    ("big", dict(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3), 214_245_376),
]


@pytest.mark.parametrize("row,overrides,want", TABLE_3, ids=[r[0] for r in TABLE_3])
def test_parameter_count_table_3(row, overrides, want):
    cfg = Config(model=ModelConfig(**overrides))
    assert meta_count(cfg) == want


def test_base_parameter_count_equals_closed_form():
    assert paper_count() == 63_082_496
    assert meta_count(Config()) == paper_count()


def test_stacks_match_torch_transformer_plus_its_final_norms():
    """nn.Transformer adds a final LayerNorm to each stack, which the paper does not have."""
    with torch.device("meta"):
        theirs = sum(p.numel() for p in nn.Transformer(512, 8, 6, 6, 2048, batch_first=True).parameters())
        ours = count_parameters(build_model(Config()))
    assert theirs == 44_140_544
    stacks = ours - 37000 * 512  # minus the one shared embedding matrix
    assert stacks == 44_138_496
    assert theirs - stacks == 2 * (512 + 512)  # two LayerNorms: gain and bias each


def test_three_way_tying_shares_one_matrix(tiny_model):
    m = tiny_model
    assert m.src_embed.weight is m.tgt_embed.weight is m.generator.weight
    assert m.generator.bias is None  # no output bias (section 3.4)
    shared = paper_count(N=2, d=32, d_ff=64, h=4, d_k=8, d_v=8, V=V_TINY)  # one V x d matrix
    assert count_parameters(m) == shared
    untied = build_model(tiny_config(weight_tying="none"))
    assert count_parameters(untied) == shared + 2 * V_TINY * 32  # three V x d matrices


def test_no_tying_gives_three_matrices():
    torch.manual_seed(0)
    m = build_model(tiny_config(weight_tying="none"))
    ptrs = {m.src_embed.weight.data_ptr(), m.tgt_embed.weight.data_ptr(), m.generator.weight.data_ptr()}
    assert len(ptrs) == 3


def test_decoder_tying_shares_target_and_generator_only():
    cfg = dataclasses.replace(tiny_config(weight_tying="decoder"), vocab=VocabConfig(src_size=60, tgt_size=V_TINY))
    m = build_model(cfg)
    assert m.tgt_embed.weight is m.generator.weight
    assert m.src_embed.weight is not m.tgt_embed.weight
    assert m.src_embed.weight.shape == (60, 32)


def test_three_way_tying_with_unequal_vocab_raises():
    with pytest.raises(ModelInputError, match="src_vocab == tgt_vocab"):
        Transformer(50, 60, d_model=32, num_heads=4, d_ff=64, num_layers=1)
    with pytest.raises(ConfigError, match="model.weight_tying"):
        Config(vocab=VocabConfig(src_size=50, tgt_size=60))


def test_post_norm_model_has_no_final_layernorm(tiny_model):
    assert tiny_model.encoder.final_norm is None and tiny_model.decoder.final_norm is None


def test_causality(tiny_model):
    src, tgt = tokens(2, 6, 1), tokens(2, 8, 2)
    with torch.no_grad():
        base = tiny_model(src, tgt)
        for j in range(tgt.shape[1]):
            changed = tgt.clone()
            changed[:, j] = (tgt[:, j] - 3 + 1) % (V_TINY - 3) + 3  # another real token
            out = tiny_model(src, changed)
            torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-6, rtol=0)
            assert (out[:, j] - base[:, j]).abs().max() > 1e-4  # position j itself does change


def test_source_padding_invariance(tiny_model):
    src, tgt = tokens(2, 6, 3), tokens(2, 5, 4)
    padded = torch.cat([src, torch.zeros(2, 4, dtype=src.dtype)], dim=1)  # pad_id 0 appended
    with torch.no_grad():
        torch.testing.assert_close(tiny_model(padded, tgt), tiny_model(src, tgt), atol=1e-5, rtol=0)


def test_target_padding_leaves_real_positions_unchanged(tiny_model):
    src, tgt = tokens(2, 6, 5), tokens(2, 5, 6)
    padded = torch.cat([tgt, torch.zeros(2, 3, dtype=tgt.dtype)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(tiny_model(src, padded)[:, :5], tiny_model(src, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize("where", ["source", "target"])
@pytest.mark.parametrize("bad", [V_TINY, V_TINY + 7, -1])
def test_out_of_range_token_raises(tiny_model, where, bad):
    src, tgt = tokens(1, 4, 7), tokens(1, 4, 8)
    (src if where == "source" else tgt)[0, 2] = bad
    with pytest.raises(ModelInputError, match="vocab") as err:
        tiny_model(src, tgt)
    assert where in str(err.value) and str(bad) in str(err.value)


def test_return_attention_per_layer_shapes(tiny_model):
    B, S, T = 2, 6, 4
    src, tgt = tokens(B, S, 9), tokens(B, T, 10)
    src[1, -2:] = 0  # padding
    with torch.no_grad():
        logits, att = tiny_model(src, tgt, return_attention=True)
        plain = tiny_model(src, tgt)  # fast path
    assert logits.shape == (B, T, V_TINY)
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=0)  # paper path == fast path, whole model
    for name, n_keys, n_queries in (("encoder", S, S), ("decoder_self", T, T), ("cross", S, T)):
        ws = getattr(att, name)
        assert len(ws) == 2, name
        for w in ws:
            assert w.shape == (B, 4, n_queries, n_keys), name
            torch.testing.assert_close(w.sum(-1), torch.ones(B, 4, n_queries), atol=1e-5, rtol=0)
    for w in att.encoder + att.cross:
        assert w[1, ..., -2:].abs().max() == 0  # padded source keys get weight 0


def test_target_longer_than_max_len_raises(tiny_model):
    with pytest.raises(ModelInputError, match="model.max_len"):
        tiny_model(tokens(1, 4, 11), tokens(1, 65, 12))


@pytest.mark.parametrize("variant", [dict(positional="learned"), dict(norm="pre")], ids=["learned-pe", "pre-norm"])
def test_variants_build_and_run(variant):
    torch.manual_seed(0)
    model = build_model(tiny_config(**variant)).eval()
    with torch.no_grad():
        logits = model(tokens(2, 6, 13), tokens(2, 5, 14))
    assert logits.shape == (2, 5, V_TINY) and torch.isfinite(logits).all()
    faithful = count_parameters(build_model(tiny_config()))
    if variant.get("positional") == "learned":
        assert count_parameters(model) == faithful + 2 * 64 * 32  # two (max_len, d_model) tables
        assert model.src_pos.weight is not model.tgt_pos.weight
    else:
        assert isinstance(model.encoder.final_norm, nn.LayerNorm)  # pre-norm needs a final norm
        assert isinstance(model.decoder.final_norm, nn.LayerNorm)
        assert all(layer.norm_first for layer in model.encoder.layers)
        assert count_parameters(model) == faithful + 2 * 2 * 32


def test_dropout_in_train_mode_only():
    torch.manual_seed(0)
    model = build_model(tiny_config(dropout=0.1))
    src, tgt = tokens(2, 6, 15), tokens(2, 5, 16)
    with torch.no_grad():
        assert not torch.allclose(model.train()(src, tgt), model(src, tgt))
        assert torch.equal(model.eval()(src, tgt), model(src, tgt))


def test_trace_names_each_layer_and_pass(caplog):
    """Every sub-layer of every layer logs once per forward pass, named by its path in the model."""
    import logging

    from transformer_min.model.layers import set_trace

    model = build_model(tiny_config()).eval()  # a fresh model: passes are counted per layer
    n = len(model.encoder.layers)
    src = torch.tensor([[3, 4, 5, 2]])
    tgt = torch.tensor([[1, 3, 4]])
    with caplog.at_level(logging.DEBUG, logger="transformer_min.model.layers"), torch.no_grad():
        model(src, tgt)
        model(src, tgt)
    lines = [r.getMessage() for r in caplog.records if r.name == "transformer_min.model.layers"]
    for p in (1, 2):
        for i in range(n):
            for name, shape in ((f"encoder.layers.{i}.self_attn", (1, 4)), (f"encoder.layers.{i}.feed_forward", (1, 4)),
                                (f"decoder.layers.{i}.self_attn", (1, 3)), (f"decoder.layers.{i}.cross_attn", (1, 3)),
                                (f"decoder.layers.{i}.feed_forward", (1, 3))):
                want = f"pass {p} {name}"
                hits = [m for m in lines if m.split(" -> ")[0].strip() == want]
                assert len(hits) == 1, (want, lines)
                assert hits[0].endswith(str((*shape, model.d_model)))
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "transformer_min.model.layers")

    caplog.clear()
    set_trace(True)
    try:
        with caplog.at_level(logging.INFO, logger="transformer_min.model.layers"), torch.no_grad():
            model(src, tgt)
    finally:
        set_trace(False)
    info = [r for r in caplog.records if r.name == "transformer_min.model.layers" and r.levelno == logging.INFO]
    assert any(r.getMessage().startswith(f"pass 3 encoder.layers.{n - 1}.feed_forward") for r in info)


# ------------------------------------------------------------------------------------------------
# issue 13: the memory a config's model needs is estimated (closed form) before anything is built
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [
    {},
    {"weight_tying": "decoder"},
    {"weight_tying": "none"},
    {"positional": "learned"},
    {"positional": "rope"},
    {"positional": "relative"},
    {"positional": "relative", "relative_clip": 3, "num_heads": 3, "d_k": 5, "d_v": 7, "free_head_dims": True},
    {"norm": "pre"},
    {"bias": False, "final_norm": True},
    {"num_heads": 3, "d_k": 5, "d_v": 7, "free_head_dims": True},  # Table 3 rows A/B: h * d_k != d_model
])
def test_count_model_values_matches_the_built_model(overrides):
    vocab = VocabConfig(src_size=50, tgt_size=50 if overrides.get("weight_tying", "three_way") == "three_way" else 60)
    m = ModelConfig(**{"d_model": 16, "num_heads": 4, "d_ff": 24, "num_layers": 2, "max_len": 11, **overrides})
    model = build_model(Config(model=m, vocab=vocab))
    real = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert count_model_values(m, vocab) == real
    assert estimate_model_bytes(Config(model=m, vocab=vocab)) == 4 * real


@pytest.mark.parametrize("field,value", [("d_model", 1_000_000_000), ("max_len", 1_000_000_000)])
def test_a_model_too_big_for_memory_is_refused_before_building(field, value):
    cfg = Config(model=ModelConfig(**{field: value}))
    with pytest.raises(ConfigError) as err:
        build_model(cfg)  # returns at once: nothing is allocated
    msg = str(err.value)
    assert f"model.{field} = 1,000,000,000" in msg and " GB " in msg and f"fix: lower model.{field}" in msg
    check_model_memory(Config(), available=300_000_000)  # the base model (252 MB in fp32) fits in 300 MB
    with pytest.raises(ConfigError, match=r"would need 0\.3 GB .* than the 0\.2 GB"):
        check_model_memory(Config(), available=200_000_000)


def test_heads_that_do_not_divide_d_model_need_explicit_sizes():
    """Issue 13: MultiHeadAttention(512, 7) used to build with d_k = 73 and a W^O of 511 columns."""
    from transformer_min.model.attention import MultiHeadAttention

    with pytest.raises(ValueError, match=r"num_heads 7 does not divide d_model 512.*choose num_heads from \[1, 2, 4"):
        MultiHeadAttention(512, 7)
    with pytest.raises(ModelInputError, match="num_heads 7"):
        MultiHeadAttention(512, 7, d_k=64)  # d_v still derived
    with pytest.raises(AssertionError):  # the same rule as PyTorch's own module
        nn.MultiheadAttention(512, 7)
    mha = MultiHeadAttention(512, 7, d_k=64, d_v=64)  # Table 3 rows A/B: explicit sizes stay allowed
    assert (mha.w_q.out_features, mha.w_o.in_features) == (7 * 64, 7 * 64)


@pytest.mark.parametrize("section,key", [("verify", "seq_len"), ("verify", "batch_size"),
                                         ("attention", "d_model"), ("attention", "seq_len")])
def test_verify_stage_sizes_too_big_for_memory_name_the_field(section, key):
    from transformer_min.core.config import AttentionDemoConfig, VerifyConfig

    cls = {"verify": VerifyConfig, "attention": AttentionDemoConfig}[section]
    cfg = Config(**{section: cls(**{key: 10**9})})
    check_model_memory(cfg)  # the model itself is the base model: it fits
    with pytest.raises(ConfigError) as err:
        check_model_memory(cfg, stages=True)
    assert f"{section}.{key} = 1,000,000,000" in str(err.value) and f"fix: lower {section}.{key}" in str(err.value)
    check_model_memory(Config(), available=300_000_000, stages=True)  # the defaults need a few MB beside the model
