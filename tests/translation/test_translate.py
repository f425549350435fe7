"""translation.translate and translation.token_ids: batched decoding gives what decoding each sentence
alone gives (greedy and beam search of section 6.1), skipped sentences come back empty, ids are parsed."""

import logging

import pytest
import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.core.errors import ConfigError
from transformer_min.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_min.decoding.search import beam_search, greedy_decode, strip
from transformer_min.model.transformer import build_model
from transformer_min.translation.evaluate import tune_alpha
from transformer_min.translation.token_ids import parse_ids
from transformer_min.translation.translate import Translator, too_long, translate_ids

SOURCES = [[5, 6, 7, 8, 9, 10], [11], [4, 4, 5], [12, 13, 5, 6, 7, 8, 9, 10, 11, 4], [7, 7]]


@pytest.fixture(scope="module")
def model():
    cfg = Config(model=ModelConfig(d_model=16, num_heads=4, d_ff=32, num_layers=2, dropout=0.0, max_len=32),
                 vocab=VocabConfig(src_size=14, tgt_size=14))
    torch.manual_seed(2)
    model = build_model(cfg).eval()
    with torch.no_grad():  # a random model says EOS first; a smaller EOS row makes outputs of several lengths
        model.generator.weight[EOS_ID].mul_(0.6)
    return model


def alone(model, src: list[int], beam: int) -> list[int]:
    """One sentence, no padding, straight through decoding: the independent reference."""
    x = torch.tensor([src + [EOS_ID]])  # (1, S)
    out = (beam_search(model, x, BOS_ID, EOS_ID, PAD_ID, beam, 0.6, 5) if beam > 1
           else greedy_decode(model, x, BOS_ID, EOS_ID, PAD_ID, 5))
    return strip(out, EOS_ID, PAD_ID)[0]


@pytest.mark.parametrize("beam", [1, 2])
def test_batched_length_sorted_decoding_equals_one_sentence_at_a_time(model, beam):
    with torch.no_grad():
        got = translate_ids(model, SOURCES, beam, 0.6, 5, "cpu", batch_size=2)
        want = [alone(model, s, beam) for s in SOURCES]
    assert got == want and any(len(w) > 0 for w in want)


def test_a_translator_makes_its_step_weights_once_and_again_for_another_precision(model, monkeypatch):
    """The step weights are made at the first translation and kept (int8's prepacking is the cost of a load);
    a changed precision makes them again; what they decode is what weights made for the call decode."""
    import transformer_min.decoding.search as search

    made = []
    real = search.inference_weights
    monkeypatch.setattr(search, "inference_weights", lambda m, p="fp32": made.append(p) or real(m, p))
    t = Translator(model, Config(vocab=VocabConfig(src_size=14, tgt_size=14)), None, None, 2, 0.6)
    first = t.translate_ids(SOURCES, 0.6, "t2t", batch_size=2)
    again = t.translate_ids(SOURCES, 0.6, "t2t", batch_size=3)
    assert made == ["fp32"]
    assert first == again == translate_ids(model, SOURCES, 2, 0.6, t.cfg.decode.max_len_offset, "cpu", 2)
    t.precision = "bf16"
    t.translate_ids(SOURCES[:1], 0.6, "t2t")
    assert made == ["fp32", "fp32", "bf16"] and t.step_weights().precision == "bf16"


def test_skipped_sentences_come_back_empty_and_are_named(model, caplog):
    with caplog.at_level(logging.WARNING):
        skip = too_long(SOURCES, 4, "val", ["a b c d e f", "g", "h i j", "w " * 10, "k l"])
    assert skip == {0, 3}  # 6 + EOS and 10 + EOS pieces exceed 4
    assert "val: sentence 1 ('a b c d e f') has 6 pieces, more than model.max_len 4" in caplog.text
    with torch.no_grad():
        out = translate_ids(model, SOURCES, 1, 0.0, 5, "cpu", skip=skip)
    assert out[0] == [] and out[3] == [] and out[1] == alone(model, SOURCES[1], 1)


def test_token_ids_are_parsed_or_named():
    assert parse_ids("3 5 7") == parse_ids("3,5,7") == [3, 5, 7]
    with pytest.raises(ConfigError, match="space-separated integers, got 'a b'"):
        parse_ids("a b")
    with pytest.raises(ConfigError, match="at least one token id"):
        parse_ids(" ")


def test_tune_alpha_grows_the_grid_while_its_largest_alpha_wins():
    """A scripted decoder: val BLEU by alpha written out; 1.4 wins the grid, so 1.8 is tried and loses."""
    bleu = {0.6: 30.0, 1.0: 31.0, 1.4: 32.0, 1.8: 31.5}
    calls, lines = [], []

    def decoder(split, alpha):
        calls.append((split, alpha))
        return [], {"bleu": bleu[alpha]}

    alpha, record = tune_alpha(decoder, "val", "test", [0.6, 1.0, 1.4], 0.4, lines.append)
    assert alpha == 1.4 and calls == [("val", 0.6), ("val", 1.0), ("val", 1.4), ("val", 1.8)]
    assert record == {"split": "val", "bleu": {"0.6": 30.0, "1.0": 31.0, "1.4": 32.0, "1.8": 31.5}, "chosen": 1.4}
    assert lines == ["alpha chosen on val: 1.4 (0.6 -> 30.00, 1.0 -> 31.00, 1.4 -> 32.00, 1.8 -> 31.50)"]
    tune_alpha(decoder, "val", "val", [0.6], 0, lines.append)
    assert lines[1] == "note: alpha is tuned on val, the split being scored; its BLEU is optimistic"
