"""verify/checks/architecture.py: the paper's dimensions and Figure 1's wiring, and what breaks them."""

from __future__ import annotations

import pytest

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.verify.checks import architecture
from transformer_min.verify.registry import Context, load_all, run_check

BY_ID = {c.id: c for c in load_all()}
IDS = [i for i in BY_ID if i.startswith("architecture.")]


def tiny_context() -> Context:
    return Context(Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0),
                          vocab=VocabConfig(src_size=50, tgt_size=50)))


def run(check_id: str, ctx: Context | None = None):
    return run_check(BY_ID[check_id], ctx or tiny_context())


@pytest.mark.parametrize("check_id", IDS)
def test_passes_on_tiny_config(check_id):
    o = run(check_id)
    assert o.passed, o.error or o.result.measured


def test_stage_holds_the_expected_checks():
    assert set(IDS) == {"architecture.base_dimensions", "architecture.sublayer_outputs_d_model",
                        "architecture.no_final_layernorm", "architecture.cross_attention_reads_encoder_top",
                        "architecture.decoder_input_shifted_right"}


def test_sublayer_outputs_follow_the_config_d_model():
    o = run("architecture.sublayer_outputs_d_model")
    assert o.result.measured == "12/12 outputs end in 32"  # 2 embedding + PE, N = 2: 2 x 2 encoder, 2 x 3 decoder


def test_final_layernorm_is_caught(monkeypatch):
    real = architecture.tiny_model
    monkeypatch.setattr(architecture, "tiny_model", lambda seed=0, **kw: real(seed, final_norm=True, **kw))
    o = run("architecture.no_final_layernorm")
    assert not o.passed and "LayerNorm" in o.result.measured


def test_cross_attention_on_the_embeddings_is_caught(monkeypatch):
    """A decoder that attends to the source embeddings instead of the encoder output."""
    from transformer_min.model.transformer import Transformer

    real_decode = Transformer.decode

    def wrong_memory(self, tgt, memory, *args, **kwargs):
        return real_decode(self, tgt, memory * 0.5, *args, **kwargs)

    monkeypatch.setattr(Transformer, "decode", wrong_memory)
    assert not run("architecture.cross_attention_reads_encoder_top").passed


def test_unshifted_decoder_input_is_caught(monkeypatch):
    from transformer_min.data import batch

    def unshifted(pairs, bos_id, eos_id, pad_id):
        b = batch.Batch(batch.pad_sequences([s for s, _ in pairs], pad_id),
                        batch.pad_sequences([t + [eos_id] for _, t in pairs], pad_id),
                        batch.pad_sequences([t + [eos_id] for _, t in pairs], pad_id))
        return b

    monkeypatch.setattr(batch, "make_batch", unshifted)
    assert not run("architecture.decoder_input_shifted_right").passed


def test_tiny_helpers_are_seeded():
    a, b = architecture.tiny_model(3), architecture.tiny_model(3)
    assert all((p - q).abs().max() == 0 for p, q in zip(a.parameters(), b.parameters()))
    src, tgt = architecture.tiny_batch()
    assert src.shape == (2, 7) and tgt.shape == (2, 6) and int(src.min()) >= 3
