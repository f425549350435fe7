"""verify/checks/embeddings.py: sqrt(d_model) scaling, unscaled pre-softmax layer, three-way tying."""

from __future__ import annotations

from torch import nn

from transformer_min.model.embeddings import TokenEmbedding
from transformer_min.verify.checks import embeddings as checks
from tests.verify.helpers import run





def test_missing_scale_is_caught(monkeypatch):
    monkeypatch.setattr(TokenEmbedding, "forward", lambda self, tokens: nn.functional.embedding(tokens, self.weight))
    o = run("embeddings.scaled_by_sqrt_d_model")
    assert not o.passed and "1.0" in o.result.measured


class Scaled(nn.Module):
    """The bug: the pre-softmax layer multiplied by sqrt(d_model) like the embeddings."""

    def __init__(self, inner: nn.Module, scale: float):
        super().__init__()
        self.inner, self.scale, self.bias = inner, scale, None

    def forward(self, h):
        return self.inner(h) * self.scale


def test_scaled_pre_softmax_layer_is_caught(monkeypatch):
    real = checks.tiny_model

    def scaled_generator(seed=0, **kw):
        model = real(seed, **kw)
        model.generator = Scaled(model.generator, model.d_model ** 0.5)
        return model

    monkeypatch.setattr(checks, "tiny_model", scaled_generator)
    assert not run("embeddings.pre_softmax_not_scaled").passed


def test_untied_model_is_caught(monkeypatch):
    real = checks.tiny_model
    monkeypatch.setattr(checks, "tiny_model", lambda seed=0, **kw: real(seed, **{"weight_tying": "decoder", **kw}))
    o = run("embeddings.three_way_tying")
    assert not o.passed and "same object: False" in o.result.measured
