"""`tmin export --ctranslate2` and `--engine ctranslate2` (issue 18): the export computes our model's function.

References are independent of the exporter: our PyTorch model's own log-probabilities under teacher forcing
and its own greedy search; CTranslate2 computes with its own kernels from the written files."""

import json

import pytest
import torch

from transformer_min.cli.main import main
from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.transformer import build_model
from transformer_min.translation.ct2_engine import rerank

ctranslate2 = pytest.importorskip("ctranslate2", reason="the optional extra .[export] is not installed")

V = 50
VOCAB = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(V - 4)]


def _ours_logp(model, src, tgt):
    with torch.no_grad():
        logits = model(torch.tensor([src + [2]]), torch.tensor([[1] + tgt]))  # (1, T + 1, V)
    return torch.log_softmax(logits.float(), -1)[0].gather(1, torch.tensor(tgt + [2])[:, None])[:, 0]


def _save(spec, path):
    spec.validate()
    spec.optimize()
    path.mkdir()
    spec.save(str(path))
    return ctranslate2.Translator(str(path), intra_threads=1)


@pytest.mark.parametrize("model_kw", [
    dict(positional="sinusoidal"), dict(positional="learned"), dict(positional="rope"),
    dict(positional="relative", relative_clip=3), dict(norm="pre"), dict(norm="pre", positional="rope"),
    dict(bias=False, weight_tying="none"), dict(d_k=4, d_v=4, free_head_dims=True),
], ids=["sinusoidal", "learned", "rope", "relative", "pre-norm", "pre-norm-rope", "no-bias-untied", "d_k-4"])
def test_export_reproduces_our_log_probs(model_kw, tmp_path):
    """Per-token log P of fixed random targets agree within 1e-4, for every mapped configuration."""
    from transformer_min.translation.ct2_export import build_spec

    torch.manual_seed(0)
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=64,
                                   **model_kw), vocab=VocabConfig(src_size=V, tgt_size=V))
    model = build_model(cfg).eval()
    with torch.no_grad():  # LayerNorm gains and biases off their 1 / 0 start, so a mapping slip shows
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.2 * torch.randn_like(p))
    tr = _save(build_spec(model, cfg, VOCAB), tmp_path / "ct2")
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(8):
        src = torch.randint(4, V, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist()
        tgt = torch.randint(4, V, (int(torch.randint(1, 15, (1,), generator=g)),), generator=g).tolist()
        theirs = tr.score_batch([[VOCAB[i] for i in src] + ["</s>"]], [[VOCAB[i] for i in tgt]])[0].log_probs
        ours = _ours_logp(model, src, tgt)
        assert len(theirs) == len(tgt) + 1  # every token and EOS
        worst = max(worst, (ours - torch.tensor(theirs)).abs().max().item())
    assert worst < 1e-4


def test_a_configuration_ctranslate2_cannot_express_is_refused_by_name(tmp_path):
    from transformer_min.core.errors import ConfigError
    from transformer_min.translation.ct2_export import build_spec

    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, final_norm=True, max_len=64),
                 vocab=VocabConfig(src_size=V, tgt_size=V))
    with pytest.raises(ConfigError, match=r"model.final_norm = true with model.norm = \"post\""):
        build_spec(build_model(cfg), cfg, VOCAB)
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, d_k=4, d_v=8,
                                   free_head_dims=True, max_len=64), vocab=VocabConfig(src_size=V, tgt_size=V))
    with pytest.raises(ConfigError, match=r"model.d_k 4 != model.d_v 8"):
        build_spec(build_model(cfg), cfg, VOCAB)


def test_rerank_uses_the_papers_length_penalty():
    """CTranslate2's score log P / n^alpha (n = |Y| + EOS) re-ranked by log P / ((5 + n) / 6)^alpha, by hand:
    a: 3 tokens, log P -3.0 -> ct2 -3.0 / 4^0.6, paper -3.0 / 1.5^0.6 = -2.352;
    b: 9 tokens, log P -4.0 -> ct2 -4.0 / 10^0.6 = -1.005 (ct2's best), paper -4.0 / 2.5^0.6 = -2.308 (best too);
    with alpha 0.2: a -3.0 / 1.5^0.2 = -2.771, b -4.0 / 2.5^0.2 = -3.334: a wins."""
    hyps = [["x"] * 3, ["x"] * 9]
    for alpha, want in ((0.6, 1), (0.2, 0)):
        scores = [-3.0 / 4 ** alpha, -4.0 / 10 ** alpha]
        assert rerank(hyps, scores, alpha, limit=60) == want


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny De->En model of test_eval_src, exported."""
    from tests.translation.test_eval_src import tiny_run

    run_dir, test, _ = tiny_run(tmp_path_factory.mktemp("ct2"))
    out = run_dir.parent / "ct2"
    assert main(["export", "--ctranslate2", "--checkpoint", str(run_dir), "--out", str(out)]) == 0
    return run_dir, out, test


def test_greedy_through_the_export_is_identical_to_ours(exported, capsys):
    run_dir, out, test = exported
    files = ["--src", str(test / "t.de"), "--ref", str(test / "t.en")]
    assert main(["eval", "--checkpoint", str(run_dir), "--beam", "1", *files, "--out", str(out / "ours.txt")]) == 0
    assert main(["eval", "--engine", "ctranslate2", "--model", str(out), "--beam", "1", *files]) == 0
    ours = (out / "ours.txt").read_text(encoding="utf-8").splitlines()
    theirs = (out / "hyp.t.de.ct2_default.en").read_text(encoding="utf-8").splitlines()
    assert len(ours) == 12 and ours == theirs
    record = json.loads((out / "hyp.t.de.ct2_default.en.json").read_text())
    assert record["engine"] == "ctranslate2" and record["model"] == str(out)
    capsys.readouterr()
    assert main(["translate", "--engine", "ctranslate2", "--model", str(out), "--beam", "1", "ein hund läuft ."]) == 0
    via_ct2 = capsys.readouterr().out.strip()
    assert main(["translate", "--checkpoint", str(run_dir), "--beam", "1", "ein hund läuft ."]) == 0
    assert capsys.readouterr().out.strip() == via_ct2


def test_trained_model_log_probs_of_a_fixed_target_agree_within_1e_4(exported):
    from transformer_min.model.saved import load_model
    from transformer_min.translation.ct2_engine import load_ct2_model

    run_dir, out, _ = exported
    model, _ = load_model(run_dir)
    ct2 = load_ct2_model(out, threads=1)
    src_lists = ct2.tokenizer.encode(["ein hund läuft im park .", "eine frau sieht den roten ball ."])
    tgt_lists = ct2.tokenizer.encode(["a dog runs in the park .", "a woman sees the red ball ."])
    for src, tgt in zip(src_lists, tgt_lists):
        theirs = torch.tensor(ct2.log_probs(src, tgt))
        assert theirs.shape == (len(tgt) + 1,)
        assert (theirs - _ours_logp(model, src, tgt)).abs().max().item() < 1e-4


def test_export_refuses_to_overwrite_and_names_the_fix(exported, capsys):
    run_dir, out, _ = exported
    before = (out / "model.bin").stat().st_mtime_ns
    assert main(["export", "--ctranslate2", "--checkpoint", str(run_dir), "--out", str(out)]) == 2
    assert "holds an earlier export; fix: choose a new folder, or pass --force" in capsys.readouterr().err
    assert (out / "model.bin").stat().st_mtime_ns == before
    assert main(["export", "--ctranslate2", "--checkpoint", str(run_dir), "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".ct2")) == []  # no leftovers
