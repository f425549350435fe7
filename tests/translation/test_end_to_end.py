"""Translating and scoring end to end, CI-sized: a short training run, then average, eval (a split,
--tune-alpha), translate (arguments, stdin, attention); an over-long eval sentence."""

import io
import json

import pytest
import torch

from transformer_min.data.pipeline import prepare
from transformer_min.translation.evaluate import TranslationEvaluator
from transformer_min.translation.translate import too_long, translate_ids


def test_short_training_run_val_loss_drops_then_translate_and_eval(data_config, capsys, monkeypatch):
    from transformer_min.cli.main import main
    from transformer_min.training.run import train

    cfg = data_config(eval_interval=20)
    result, run_dir = train(cfg)
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r["eval_val_nll"] for r in recs if "eval_val_nll" in r]
    assert len(val) >= 2 and val[-1] < val[0]
    assert (run_dir / "spm.model").exists()

    assert main(["average", str(run_dir), "--last", "2"]) == 0
    assert main(["eval", "--checkpoint", str(run_dir / "checkpoints" / "averaged.pt"), "--split", "val"]) == 0
    out = capsys.readouterr().out
    assert "BLEU" in out and "chrF" in out and "tok:none" in out  # sacrebleu signature, tokenize='none'
    hyp = next(run_dir.glob("hyp.val.averaged.en"))
    assert len(hyp.read_text().splitlines()) == 30

    # --tune-alpha: every alpha of the grid decoded on val, the best one used for the scored split
    tuned_out = run_dir / "hyp.tuned.txt"
    assert main(["eval", "--checkpoint", str(run_dir / "checkpoints" / "averaged.pt"), "--tune-alpha",
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
