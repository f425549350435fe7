"""The translation pipeline, CI-sized: prepare, cache, errors, batches, a short training run, eval (the
library behind eval and translate: tests/translation)."""

import dataclasses
import io
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


def test_short_training_run_val_loss_drops_then_translate_and_eval(data_config, capsys, monkeypatch):
    from transformer_min.cli.main import main
    from transformer_min.cli.train import train

    cfg = data_config(eval_interval=20)
    result, run_dir = train(cfg)
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r["eval_val_nll"] for r in recs if "eval_val_nll" in r]
    assert len(val) >= 2 and val[-1] < val[0]
    assert (run_dir / "spm.model").exists()

    assert main(["average", str(run_dir), "--last", "2"]) == 0
    assert main(["eval", "--checkpoint", str(run_dir / "checkpoints" / "averaged.safetensors"), "--split", "val"]) == 0
    out = capsys.readouterr().out
    assert "BLEU" in out and "chrF" in out and "tok:none" in out  # sacrebleu signature, tokenize='none'
    hyp = next(run_dir.glob("hyp.val.averaged.en"))
    assert len(hyp.read_text().splitlines()) == 30

    # --tune-alpha: every alpha of the grid decoded on val, the best one used for the scored split
    tuned_out = run_dir / "hyp.tuned.txt"
    assert main(["eval", "--checkpoint", str(run_dir / "checkpoints" / "averaged.safetensors"), "--tune-alpha",
                 "--alpha-grid", "0.6,1.0", "--alpha-step", "0", "--hyp-out", str(tuned_out)]) == 0
    res = json.loads(tuned_out.with_suffix(".txt.json").read_text())
    grid = res["tuned_alpha"]["bleu"]
    assert set(grid) == {"0.6", "1.0"} and res["tuned_alpha"]["split"] == "val"
    assert res["alpha"] == res["tuned_alpha"]["chosen"] and grid[str(res["alpha"])] == max(grid.values())
    assert "alpha chosen on val" in capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(run_dir), "--tune-alpha", "--alpha", "1.0"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(run_dir), "--tune-alpha", "--alpha-grid", "0.6,x"]) == 2
    assert "--alpha-grid" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(run_dir), "ein mann sieht den ball .",
                 "--attention", str(run_dir / "att.png"), "--csv", str(run_dir / "att")]) == 0
    assert (run_dir / "att.png").read_bytes()[:4] == b"\x89PNG"
    header = (run_dir / "att" / "cross_attn_head0.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[0] == "query \\ key" and header[-1] == "</s>" and "▁ein" in header  # source pieces

    capsys.readouterr()  # translate reads lines from stdin when given no arguments; blank lines are skipped
    monkeypatch.setattr("sys.stdin", io.StringIO("ein mann sieht den ball .\n\nEin Hund läuft.\n"))
    assert main(["translate", "--checkpoint", str(run_dir)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


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
