"""The data pipeline, CI-sized: prepare, cache, errors, batches (translating and scoring: tests/translation)."""

import dataclasses
import json

import pytest
import torch

from transformer_min.data import pipeline
from transformer_min.data.batching import TokenBatcher, pack_by_length
from transformer_min.core.errors import DataError


def test_prepare_learns_a_shared_vocabulary_and_reuses_the_cache(data_config):
    cfg = data_config()
    first = pipeline.prepare(cfg)
    assert not first.reused and len(first.tokenizer) == 60
    assert first.stats["train"] == {"pairs": 200, "kept": 200, "empty": 0, "too_long": 0}
    assert len(first.splits["val"]) == 30 and len(first.references["test_2016_flickr"]) == 20
    s, t = first.splits["train"][0]
    assert first.tokenizer.decode([t])[0] == first.references["train"][0]  # round trip
    second = pipeline.prepare(cfg)
    assert second.reused and second.cache_dir == first.cache_dir


def test_misaligned_files_name_both_files_and_counts(data_config, corpus):
    path = corpus / "tok" / "train.lc.norm.tok.en.gz"
    import gzip

    with gzip.open(path, "at", encoding="utf-8") as f:
        f.write("one extra line\n")
    with pytest.raises(DataError, match=r"train\.lc\.norm\.tok\.de\.gz has 200 lines but .*train\.lc\.norm\.tok\.en\.gz has 201"):
        pipeline.prepare(data_config())


def test_empty_and_overlong_pairs_are_counted_and_skipped(data_config, corpus):
    from tests.data.conftest import make_pairs, write_split

    pairs = make_pairs(200, 1)
    pairs[5] = ("", "")
    pairs[6] = (" ".join(["ein mann"] * 40), "a man")
    write_split(corpus, "train", pairs)
    p = pipeline.prepare(data_config())
    assert p.stats["train"]["empty"] == 1 and p.stats["train"]["too_long"] == 1
    assert p.stats["train"]["kept"] == 198


def test_missing_data_names_the_config_field(data_config, tmp_path):
    cfg = data_config()
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, data_dir=str(tmp_path / "nowhere")))
    with pytest.raises(DataError, match="data.data_dir"):
        pipeline.prepare(cfg)


def test_token_batches_respect_the_budget_are_reproducible_and_sharded():
    g = torch.Generator().manual_seed(0)
    # parallel text: target lengths follow source lengths, give or take a few tokens
    src_len = torch.randint(2, 30, (500,), generator=g)
    tgt_len = (src_len + torch.randint(-3, 4, (500,), generator=g)).clamp(min=2)
    lengths = list(zip(src_len.tolist(), tgt_len.tolist()))
    batches = pack_by_length(lengths, 300, torch.Generator().manual_seed(1))
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(max(max(lengths[i]) for i in b) * len(b) <= 300 for b in batches if len(b) > 1)
    again = pack_by_length(lengths, 300, torch.Generator().manual_seed(1))
    assert batches == again
    examples = [([5] * (a - 1), [6] * (b - 1)) for a, b in lengths]
    r0 = TokenBatcher(examples, 300, 7, 1, 2, 0, rank=0, world=2)
    r1 = TokenBatcher(examples, 300, 7, 1, 2, 0, rank=1, world=2)
    assert len(r0) == len(r1) and set(map(tuple, r0._plan)).isdisjoint(map(tuple, r1._plan))
    assert r0.padding_fraction(0) < 0.10 and r0.padding_fraction(1) < 0.10


# ----------------------------------------------------------------------------- bad data files (issue 13)
def test_a_split_without_text_is_named(data_config, corpus):
    from tests.data.conftest import write_split

    write_split(corpus, "val", [("  ", "\t")] * 30, gz=False)
    with pytest.raises(DataError, match=r"data\.valid_split: split 'val' has no text") as e:
        pipeline.prepare(data_config())
    assert "val.lc.norm.tok.de" in str(e.value)
    write_split(corpus, "train", [("", "")] * 10)  # the vocabulary's split: checked first
    with pytest.raises(DataError, match=r"data\.train_split: split 'train' has no text"):
        pipeline.prepare(data_config())


def test_a_truncated_gz_is_named(data_config, corpus):
    path = corpus / "tok" / "train.lc.norm.tok.de.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"train\.lc\.norm\.tok\.de\.gz: the gzip file is truncated"):
        pipeline.prepare(data_config())


def test_a_non_utf8_byte_is_given_its_line_number(data_config, corpus):
    """Line 500 of a file far longer than one read chunk: the line number, not a chunk offset."""
    lines = ["ein mann sieht den ball ."] * 600
    path = corpus / "tok" / "train.lc.norm.tok.de.gz"
    import gzip

    with gzip.open(path, "wb") as f:
        for i, line in enumerate(lines, 1):
            f.write((line + (" caf\xe9" if i == 500 else "") + "\n").encode("latin-1"))
    with pytest.raises(DataError, match=r"train\.lc\.norm\.tok\.de\.gz, line 500: byte 0xe9 at column 30 is not UTF-8"):
        pipeline.prepare(data_config())
