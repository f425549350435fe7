"""`tmin export --hf` and `--engine hf` (issue 36): the MarianMT folder computes our model's function.

References are independent of the exporter: our PyTorch model's own logits under teacher forcing and its own
greedy and beam searches on one side; transformers' MarianMTModel, MarianTokenizer, `generate` and
`pipeline("translation")`, loaded offline from the written folder, on the other."""

import json
import os

import pytest
import torch

from transformer_min.cli.main import main
from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.transformer import build_model

transformers = pytest.importorskip("transformers", reason="the optional extra .[hf] is not installed")
os.environ["HF_HUB_OFFLINE"] = "1"  # tests never download

V = 50


def _perturbed(cfg: Config, seed: int = 0):
    """A random model whose LayerNorm gains and biases are off their 1 / 0 start, so a mapping slip shows."""
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name or "_pos" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


def _batch(seed: int = 1):
    """Two padded sources (EOS-terminated) and two BOS-started targets of random ids."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (2, 9), generator=g)
    src[:, -1] = 2
    src[1, 5], src[1, 6:] = 2, 0
    tgt = torch.randint(4, V, (2, 7), generator=g)
    tgt[:, 0] = 1
    return src, tgt


def _tiny(**model_kw) -> Config:
    model_kw = {"d_model": 32, "num_heads": 4, **model_kw}
    return Config(model=ModelConfig(d_ff=64, num_layers=2, dropout=0.0, max_len=64, **model_kw),
                  vocab=VocabConfig(src_size=V, tgt_size=V))


@pytest.mark.parametrize("model_kw", [dict(), dict(norm="pre", positional="learned")], ids=["paper", "pre-learned"])
def test_permute_then_unpermute(model_kw):
    """The residual-stream permutation alone, on our own model: a random permutation of the model dimension
    (positions permuted alike) computes the same logits, and its inverse gives back every tensor exactly."""
    from transformer_min.translation.hf_export import permute_residual

    cfg = _tiny(**model_kw)
    model = _perturbed(cfg)
    order = torch.randperm(32, generator=torch.Generator().manual_seed(3))
    state = model.state_dict()
    permuted = permute_residual(state, order)
    assert sum(not torch.equal(permuted[k], state[k]) for k in state) > len(state) // 2
    other = build_model(cfg).eval()
    other.load_state_dict(permuted)
    if cfg.model.positional == "sinusoidal":  # the fixed table is a buffer outside the state dict
        other.src_pos.pe = other.tgt_pos.pe = model.src_pos.pe[:, order]
    src, tgt = _batch()
    with torch.no_grad():
        assert (model(src, tgt) - other(src, tgt)).abs().max().item() < 1e-5
    back = permute_residual(permuted, torch.argsort(order))
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_marian_order_maps_our_table_onto_marians():
    """Our interleaved table (section 3.5), permuted, is the table MarianMTModel builds itself, bit for bit."""
    from transformer_min.model.embeddings import sinusoidal_table
    from transformer_min.translation.hf_export import marian_config, marian_order

    for d, h in ((32, 4), (33, 3)):
        hf = transformers.MarianMTModel(marian_config(_tiny(d_model=d, num_heads=h)))
        theirs = hf.model.encoder.embed_positions.weight.detach()  # (max_len 64, d)
        assert torch.equal(sinusoidal_table(64, d)[:, marian_order(d)], theirs)


@pytest.mark.parametrize("model_kw", [dict(), dict(bias=False)], ids=["paper", "no-bias"])
def test_marian_logits_equal_ours(model_kw):
    from transformer_min.translation.hf_export import marian_model

    cfg = _tiny(**model_kw)
    model = _perturbed(cfg)
    hf = marian_model(model, cfg)
    src, tgt = _batch()
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
    assert (ours - theirs).abs().max().item() < 1e-4


@pytest.mark.parametrize("model_kw, named", [
    (dict(norm="pre"), 'model.norm = "pre"'), (dict(positional="rope"), 'model.positional = "rope"'),
    (dict(positional="relative"), 'model.positional = "relative"'),
    (dict(positional="learned"), 'model.positional = "learned"'),
    (dict(d_k=4, d_v=4, free_head_dims=True), "model.d_k 4, model.d_v 4"),
    (dict(weight_tying="none"), 'model.weight_tying = "none"'), (dict(final_norm=True), "model.final_norm = true"),
    (dict(layer_norm_eps=1e-6), "model.layer_norm_eps = 1e-06"),
], ids=["pre-norm", "rope", "relative", "learned", "d_k", "untied", "final-norm", "eps"])
def test_what_marian_cannot_express_is_named(model_kw, named):
    from transformer_min.translation.hf_export import unsupported_hf

    assert unsupported_hf(_tiny()) == []
    problems = unsupported_hf(_tiny(**model_kw))
    assert len(problems) == 1 and named in problems[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny De->En model of test_eval_src (60 updates), exported; 100 made-up test sentences."""
    from tests.data.conftest import make_pairs
    from tests.translation.test_eval_src import tiny_run

    run_dir, test, _ = tiny_run(tmp_path_factory.mktemp("hf"))
    out = run_dir.parent / "hf"
    assert main(["export", "--hf", str(out), "--checkpoint", str(run_dir)]) == 0
    pairs = make_pairs(100, 11)
    return run_dir, out, test, pairs


def test_the_folder_loads_offline_with_transformers_alone(exported):
    _, out, _, _ = exported
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "source.spm", "target.spm",
            "vocab.json", "tokenizer_config.json", "tmin_config.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)  # no pickle in the folder
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["num_beams"] == 2 and gen["length_penalty"] == 0.6 and gen["max_length"] == 64  # the run's decode
    assert gen["decoder_start_token_id"] == 1 and gen["eos_token_id"] == 2 and gen.get("forced_eos_token_id") is None
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out), local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert type(model).__name__ == "MarianMTModel" and type(tok).__name__ == "MarianTokenizer"
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert "model.shared.weight" in f.keys()


def test_marian_tokenizer_ids_are_our_ids(exported):
    from transformer_min.data.tokenizer import Tokenizer

    run_dir, out, _, pairs = exported
    ours = Tokenizer(run_dir / "spm.model")
    tok = transformers.MarianTokenizer.from_pretrained(str(out), local_files_only=True)
    texts = [de for de, _ in pairs] + ["ein qzx hund ."]  # an unknown character too
    assert tok(texts)["input_ids"] == [ids + [2] for ids in ours.encode(texts)]
    en = tok(text_target=[e for _, e in pairs])["input_ids"]
    assert en == [ids + [2] for ids in ours.encode([e for _, e in pairs])]
    assert tok.batch_decode(en, skip_special_tokens=True) == ours.decode([ids[:-1] for ids in en])


def test_teacher_forced_logits_match_within_1e_4_on_50_sentences(exported):
    from transformer_min.model.saved import load_model
    from transformer_min.translation.hf_engine import load_hf_model

    run_dir, out, _, pairs = exported
    model, _ = load_model(run_dir)
    hf = load_hf_model(out)
    worst = 0.0
    for de, en in pairs[:50]:
        src, tgt = hf.tokenizer.encode([de, en])
        with torch.no_grad():
            ours = model(torch.tensor([src + [2]]), torch.tensor([[1] + tgt]))[0]
        worst = max(worst, (ours - hf.logits(src, tgt)).abs().max().item())
    print(f"teacher-forced logits, 50 sentences: max |ours - MarianMT| = {worst:.2e}")
    assert worst < 1e-4


def test_greedy_generate_equals_ours_on_100_sentences(exported, capsys):
    from transformer_min.model.saved import load_model
    from transformer_min.translation.hf_engine import load_hf_model
    from transformer_min.translation.translate import translate_ids

    run_dir, out, _, pairs = exported
    model, _ = load_model(run_dir)
    hf = load_hf_model(out)
    src = hf.tokenizer.encode([de for de, _ in pairs])
    ours = translate_ids(model, src, 1, 0.0, 50, "cpu")
    theirs = hf.translate_ids(src, 1, 0.0, 50)
    assert len(ours) == 100 and theirs == ours
    # and beam search: transformers' own (penalty log P / |Y|^alpha) against tensor2tensor's; measured, bounded
    for beam in (2, 4):
        ours_b = translate_ids(model, src, beam, 0.6, 50, "cpu")
        same = sum(a == b for a, b in zip(ours_b, hf.translate_ids(src, beam, 0.6, 50)))
        print(f"beam {beam}: {same}/100 identical")
        assert same >= 80


def test_eval_and_translate_through_the_engine_equal_ours(exported, capsys):
    run_dir, out, test, _ = exported
    files = ["--src", str(test / "t.de"), "--ref", str(test / "t.en")]
    assert main(["eval", "--checkpoint", str(run_dir), "--beam", "1", *files, "--out", str(out / "ours.txt")]) == 0
    assert main(["eval", "--engine", "hf", "--model", str(out), "--beam", "1", *files]) == 0
    printed = capsys.readouterr().out
    assert "beam 1 (hf)" in printed and "nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:" in printed
    ours = (out / "ours.txt").read_text(encoding="utf-8").splitlines()
    theirs = (out / "hyp.t.de.hf.en").read_text(encoding="utf-8").splitlines()
    assert len(ours) == 12 and ours == theirs
    rec, our_rec = (json.loads(p.read_text()) for p in (out / "hyp.t.de.hf.en.json", out / "ours.txt.json"))
    assert rec["engine"] == "hf" and rec["model"] == str(out) and rec["bleu"] == our_rec["bleu"]
    assert main(["translate", "--engine", "hf", "--model", str(out), "--beam", "1", "Ein Hund läuft."]) == 0
    via_hf = capsys.readouterr().out.strip()
    assert main(["translate", "--checkpoint", str(run_dir), "--beam", "1", "Ein Hund läuft."]) == 0
    assert capsys.readouterr().out.strip() == via_hf


def test_pipeline_translation_in_three_lines(exported):
    """docs/export.md's three lines (with beam 1, to compare with our greedy output)."""
    run_dir, out, _, pairs = exported
    from transformers import pipeline

    mt = pipeline("translation", model=str(out))
    texts = [de for de, _ in pairs[:10]]
    got = [r["translation_text"] for r in mt(texts, num_beams=1)]
    from transformer_min.translation.translate import translate

    assert got == translate(str(run_dir), texts, None, beam=1).hyps


def test_a_foreign_marian_folder_is_read_as_raw_text(exported, tmp_path):
    """A MarianMT folder without our tmin_config.json: its own tokenizer, raw text, its beam settings."""
    import shutil

    _, out, _, pairs = exported
    foreign = tmp_path / "opus-like"
    shutil.copytree(out, foreign, ignore=shutil.ignore_patterns("tmin_config.json", "spm.model", "hyp.*", "ours*"))
    from transformer_min.translation.hf_engine import MarianText, load_hf_model

    hf = load_hf_model(foreign)
    assert isinstance(hf.tokenizer, MarianText) and hf.cfg.data.track == "raw" and hf.cfg.decode.beam_size == 2
    src = hf.tokenizer.encode([de for de, _ in pairs[:5]])
    ours = load_hf_model(out)
    assert hf.translate_ids(src, 1, 0.0, 50) == ours.translate_ids(src, 1, 0.0, 50)


def test_export_refuses_to_overwrite_and_names_the_fix(exported, capsys):
    run_dir, out, _, _ = exported
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert main(["export", "--hf", str(out), "--checkpoint", str(run_dir)]) == 2
    assert "holds an earlier export; fix: choose a new folder, or pass --force" in capsys.readouterr().err
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    assert main(["export", "--hf", str(out), "--checkpoint", str(run_dir), "--force"]) == 0
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".hf")) == []  # no leftovers
