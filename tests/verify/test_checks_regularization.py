"""verify/checks/regularization.py: dropout on sub-layer outputs before the add, and on embedding + PE."""

from __future__ import annotations


from transformer_min.model.embeddings import PositionalBase as _PositionalBase
from transformer_min.model.layers import DecoderLayer, EncoderLayer
from tests.verify.helpers import run





def test_dropout_after_the_add_is_caught(monkeypatch):
    def forward(self, x, src_mask=None, need_weights=False):
        attn, w = self.self_attn(query=x, key=x, value=x, mask=src_mask, need_weights=need_weights)
        x = self.norm1(self.dropout(x + attn))  # wrong: dropout on the sum
        x = self.norm2(self.dropout(x + self.feed_forward(x)))
        return x, w

    monkeypatch.setattr(EncoderLayer, "forward", forward)
    assert not run("dropout.residual_encoder").passed


def test_missing_decoder_dropout_is_caught(monkeypatch):
    monkeypatch.setattr(DecoderLayer, "_mha_block", lambda self, x, memory, mask, need_weights, cache: self.cross_attn(
        query=x, key=memory, value=memory, mask=mask, need_weights=need_weights))
    o = run("dropout.residual_decoder")
    assert not o.passed and "cross_attn: 0% zero" in o.result.measured


def test_dropout_on_the_embedding_alone_is_caught(monkeypatch):
    def forward(self, x, offset=0):
        return self.dropout(x) + self.positions(x.size(1), offset).to(x.dtype)  # PE added after dropout

    monkeypatch.setattr(_PositionalBase, "forward", forward)
    assert not run("dropout.embeddings_plus_pe").passed


def test_attention_dropout_default_is_checked(monkeypatch):
    from transformer_min.core.config import ModelConfig

    monkeypatch.setattr("transformer_min.verify.checks.regularization.ModelConfig",
                        lambda: ModelConfig(attention_dropout=0.1))
    o = run("dropout.only_where_the_paper_puts_it")
    assert not o.passed and "attention p [0.1]" in o.result.measured
