"""`tmin eval --src FILE --ref FILE [--ref FILE ...]` (issue 17): any test set, raw or tokenised, plain or
gzip, one or several references, scored like a prepared split; bad input gets a named error."""

import gzip
import json

import pytest
import sacrebleu

from bad_input.harness import TRACEBACK_MARKERS, tree_digest
from transformer_min.cli.main import main
from transformer_min.core.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig, VocabConfig
from transformer_min.translation.moses import as_track_text
from transformer_min.core.errors import DataError

from tests.data.conftest import make_pairs, write_split

RAW = {"ein": "Ein", "eine": "Eine", "a": "A"}  # the tok files are these sentences lowercased and split


def _raw(line: str) -> str:
    """'ein mann sieht den ball .' -> 'Ein Mann sieht den ball.': what the raw files would hold."""
    words = line.split()
    words[0] = RAW.get(words[0], words[0])
    return " ".join(words[:-1]) + words[-1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("evalsrc"))


def tiny_run(tmp):
    """A tiny De->En model trained for 60 updates on the conftest corpus, and a test set of 12 pairs in
    four files: tok plain, raw gzip, for each side."""
    from transformer_min.cli.train import train

    root = tmp / "multi30k"
    write_split(root, "train", make_pairs(200, 1))
    write_split(root, "val", make_pairs(30, 2))
    write_split(root, "test_2016_flickr", make_pairs(20, 3))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60),
                 data=DataConfig(data_dir=str(root), vocab_size=60, max_len=40), decode=DecodeConfig(beam_size=2),
                 train=TrainConfig(task="translation", steps=60, batch_tokens=400, warmup_steps=30,
                                   eval_interval=1000, checkpoint_interval=30, out_dir=str(tmp / "runs"),
                                   name="tiny", seed=3, device="cpu"))
    _, run_dir = train(cfg)
    test = tmp / "test"
    test.mkdir()
    pairs = make_pairs(12, 7)
    (test / "t.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
    (test / "t.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    for lang, i in (("de", 0), ("en", 1)):
        with gzip.open(test / f"raw.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(_raw(p[i]) + "\n" for p in pairs))
    return run_dir, test, [en for _, en in pairs]


def _eval(run_dir, *args):
    return main(["eval", "--checkpoint", str(run_dir), "--beam", "2", *map(str, args)])


def test_raw_gzip_and_tok_plain_files_score_alike_and_as_sacrebleu_does(run, capsys):
    run_dir, test, refs = run
    assert _eval(run_dir, "--src", test / "raw.de.gz", "--ref", test / "raw.en.gz") == 0
    out = capsys.readouterr().out
    assert "raw.de.gz: read as raw text (Moses-preprocessed)" in out
    raw_hyp = run_dir / "hyp.raw.de.step_0000060.en"  # next to the checkpoint, in its run directory
    raw_res = json.loads((run_dir / "hyp.raw.de.step_0000060.en.json").read_text())
    assert _eval(run_dir, "--src", test / "t.de", "--ref", test / "t.en", "--out", test / "tok.hyp") == 0
    assert "t.de: read as tok text" in capsys.readouterr().out
    tok_res = json.loads((test / "tok.hyp.json").read_text())
    hyps = (test / "tok.hyp").read_text(encoding="utf-8").splitlines()
    assert raw_hyp.read_text(encoding="utf-8").splitlines() == hyps and len(hyps) == 12
    assert raw_res["forms"] == ["raw", "raw"] and tok_res["forms"] == ["tok", "tok"]
    want = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none")  # independent: sacrebleu on the files
    assert raw_res["bleu"] == tok_res["bleu"] == pytest.approx(want.score)
    assert tok_res["bp"] == pytest.approx(want.bp) and tok_res["refs"] == [str(test / "t.en")]


def test_several_references(run, capsys, tmp_path):
    run_dir, test, refs = run
    assert _eval(run_dir, "--src", test / "t.de", "--ref", test / "t.en", "--out", tmp_path / "one") == 0
    hyps = (tmp_path / "one").read_text(encoding="utf-8").splitlines()
    one = json.loads((tmp_path / "one.json").read_text())
    # a second reference equal to the hypotheses: every n-gram matches one reference and the closest
    # reference length is the hypothesis length, so BLEU is 100 whatever the first reference says
    (tmp_path / "same.en").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    assert _eval(run_dir, "--src", test / "t.de", "--ref", test / "t.en", "--ref", tmp_path / "same.en",
                 "--out", tmp_path / "two") == 0
    two = json.loads((tmp_path / "two.json").read_text())
    assert one["bleu"] < 100 and two["bleu"] == pytest.approx(100.0) and two["bp"] == 1.0
    assert len(two["refs"]) == 2


def test_split_and_tune_alpha_keep_working_beside_src(run, capsys, tmp_path):
    run_dir, test, _ = run
    assert _eval(run_dir, "--split", "val", "--out", tmp_path / "val.hyp") == 0
    assert len((tmp_path / "val.hyp").read_text().splitlines()) == 30
    assert _eval(run_dir, "--src", test / "t.de", "--ref", test / "t.en", "--tune-alpha", "--alpha-grid", "0.6,1.0",
                 "--alpha-step", "0", "--out", tmp_path / "tuned") == 0
    res = json.loads((tmp_path / "tuned.json").read_text())
    assert res["tuned_alpha"]["split"] == "val" and res["split"] == "t.de"


def _write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


@pytest.mark.parametrize("case, make, expect", [
    ("misaligned", lambda t, d: (_write(d / "short.en", ["a man ."] * 11), ["--ref", d / "short.en"]),
     ["misaligned parallel files", "t.de has 12 lines", "short.en has 11"]),
    ("src without ref", lambda t, d: (None, []), ["--ref FILE"]),
    ("missing ref file", lambda t, d: (None, ["--ref", d / "nope.en"]), ["nope.en", "no such file"]),
    ("out is an input", lambda t, d: (None, ["--ref", t / "t.en", "--out", t / "t.en"]),
     ["--out", "t.en", "one of the input files"]),
    ("with --split", lambda t, d: (None, ["--ref", t / "t.en", "--split", "val"]), ["--split", "exclude"]),
    ("over-long line", lambda t, d: (_write(d / "long.de", ["ein mann " * 60 + "."] + ["ein mann ."] * 11),
                                     ["--ref", t / "t.en"]), ["line 1", "model.max_len 64", "shorten"]),
    ("not utf-8", lambda t, d: ((d / "latin.de").write_bytes(b"ein m\xe4nner .\n" * 12), ["--ref", t / "t.en"]),
     ["latin.de", "utf-8"]),
])
def test_bad_input_is_named_and_changes_nothing(run, capsys, tmp_path, case, make, expect):
    run_dir, test, _ = run
    _, extra = make(test, tmp_path)
    src = {"over-long line": tmp_path / "long.de", "not utf-8": tmp_path / "latin.de"}.get(case, test / "t.de")
    args = ["--src", src] + extra
    before = tree_digest(run_dir.parent.parent), tree_digest(tmp_path)
    assert _eval(run_dir, *args) == 2, case
    err = capsys.readouterr().err
    assert not any(m in err for m in TRACEBACK_MARKERS)
    assert all(e.lower() in err.lower() for e in expect), err
    assert (tree_digest(run_dir.parent.parent), tree_digest(tmp_path)) == before


def test_ref_without_src_is_named(run, capsys):
    assert _eval(run[0], "--ref", run[1] / "t.en") == 2
    assert "--ref needs --src" in capsys.readouterr().err


def test_forms_are_told_apart_from_the_lines():
    raw = ["A boy sits on a woman's shoulders.", "Two dogs run.", "A man in a red hat"]
    tok = ["a boy sits on a woman &apos;s shoulders .", "two dogs run .", "a man in a red hat"]
    assert as_track_text(raw, "en", "tok", "auto", "r") == (tok, "raw")
    # the first line changes on a second pass (' s), the others do not: 2 of 3 unchanged -> tok
    assert as_track_text(tok, "en", "tok", "auto", "t") == (tok, "tok")
    assert as_track_text(["  A man's hat.  "], "en", "raw", "raw", "r") == (["A man's hat."], "raw")
    # a tok file read as raw is tokenised twice: & and ; split off, then & escaped
    assert as_track_text(tok, "en", "tok", "raw", "t")[0][0] == "a boy sits on a woman &amp; apos ; s shoulders ."
    with pytest.raises(DataError, match=r"t\.en: reads as lowercased Moses-tokenised text.*--form raw"):
        as_track_text(tok, "en", "raw", "auto", "t.en")
