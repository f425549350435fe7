"""An over-long eval sentence is named, decoded as empty, and the rest of the split is scored (the
evaluator training runs included)."""

import pytest
import torch

from transformer_min.data.pipeline import prepare
from transformer_min.translation.evaluate import TranslationEvaluator
from transformer_min.translation.translate import too_long, translate_ids


def test_an_overlong_eval_sentence_is_named_and_scored_as_empty(data_config, corpus, caplog):
    """A 10,000-token val sentence: decoding it would exceed model.max_len; it is skipped with a
    warning naming the split and the sentence, and the rest of the split is scored."""
    import logging

    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.errors import ModelInputError
    from transformer_min.model.transformer import build_model

    pairs = make_pairs(30, 2)
    pairs[6] = (" ".join(["ein mann"] * 5000), "a man")
    write_split(corpus, "val", pairs, gz=False)
    cfg = data_config()
    prepared = prepare(cfg)
    src = [s for s, _ in prepared.splits["val"]]
    assert len(src[6]) >= 5000
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with pytest.raises(ModelInputError):  # what happened before: the whole evaluation failed
        translate_ids(model, src, 1, 0.0, 5, "cpu")
    with caplog.at_level(logging.WARNING):
        skip = too_long(src, cfg.model.max_len, "val", prepared.sources["val"])
        out = translate_ids(model, src, 1, 0.0, 5, "cpu", skip=skip)
    assert skip == {6} and out[6] == [] and all(len(o) > 0 for i, o in enumerate(out) if i != 6)
    assert "val: sentence 7 ('ein mann ein mann" in caplog.text and "scored as an empty translation" in caplog.text
    with torch.no_grad():
        metrics = TranslationEvaluator(cfg, prepared, "cpu")(model, final=False)
    assert set(metrics) >= {"val_nll", "val_bleu"} and metrics["val_nll"] == metrics["val_nll"]  # not NaN
