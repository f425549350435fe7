"""cli.py: `tmin` exit codes and output; `tmin verify` over the shipped config and broken ones."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from transformer_min.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

TINY_ATTENTION = """\
[attention]
d_model = 32
num_heads = 4
d_k = 8
d_v = 8
seq_len = 4
batch_size = 1
seed = 3
"""


@pytest.fixture
def at_repo_root(monkeypatch, repo_root):
    monkeypatch.chdir(repo_root)
    return repo_root


def write_config(tmp_path, text):
    path = tmp_path / "cfg.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_verify_passes_with_shipped_config(at_repo_root, capsys):
    assert main(["verify"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("config: config.toml")
    passes = re.findall(r"^\[PASS\] ", out, flags=re.M)
    assert "[FAIL]" not in out
    summary = re.search(r"^(\d+) passed, 0 failed$", out, flags=re.M)
    assert summary and int(summary.group(1)) == len(passes) >= 20
    for stage in ("attention", "multihead", "positional", "encoder", "decoder", "full", "scaling"):
        assert f"== {stage}: " in out


def test_verify_one_stage(at_repo_root, capsys):
    assert main(["verify", "positional"]) == 0
    out = capsys.readouterr().out
    assert "PE(   1,   2) =  0.8218561900175316" in out  # the paper's test vector, printed
    assert re.search(r"^5 passed, 0 failed$", out, flags=re.M)
    assert "== attention:" not in out


def test_num_heads_7_fails_naming_the_key(tmp_path, capsys):
    path = write_config(tmp_path, "[model]\nnum_heads = 7\n")
    assert main(["verify", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran
    assert captured.err.startswith("error: ")
    assert "model.num_heads: 7 does not divide d_model 512" in captured.err
    assert len(captured.err.strip().splitlines()) == 1  # one readable line, no traceback


def test_unknown_key_fails_with_suggestion(tmp_path, capsys):
    path = write_config(tmp_path, "[model]\nd_modle = 512\n")
    assert main(["verify", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert "model.d_modle" in err and "did you mean 'd_model'" in err


def test_broken_toml_fails_naming_the_line(tmp_path, capsys):
    path = write_config(tmp_path, "[model]\nd_model = 512\n[vocab\n")
    assert main(["verify", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert str(path) in err and "line 3" in err


def test_missing_explicit_config_fails(tmp_path, capsys):
    assert main(["verify", "--config", str(tmp_path / "nope.toml")]) != 0
    assert "not found" in capsys.readouterr().err


@pytest.mark.parametrize("stage,hint", [
    ("atention", "did you mean 'attention'"),
    ("nosuchstage", "stages: attention"),
])
def test_unknown_stage(at_repo_root, capsys, stage, hint):
    assert main(["verify", stage]) != 0
    captured = capsys.readouterr()
    assert f"unknown stage '{stage}'" in captured.err and hint in captured.err
    assert "[PASS]" not in captured.out


@pytest.mark.parametrize("before", [True, False], ids=["options-first", "options-after"])
def test_debug_log_file_has_sublayer_shapes(at_repo_root, tmp_path, capsys, before):
    log = tmp_path / "tmin.log"
    opts = ["--log-level", "DEBUG", "--log-file", str(log)]
    argv = [*opts, "verify", "encoder"] if before else ["verify", "encoder", *opts]
    assert main(argv) == 0
    text = log.read_text(encoding="utf-8")
    assert re.search(r"pass 1 encoder_layer\.self_attn\s+-> \(2, 16, 512\)", text)  # [verify] batch 2, seq_len 16
    assert "encoder_layer.feed_forward" in text
    assert "DEBUG" in text


def test_log_level_info_keeps_debug_out(at_repo_root, tmp_path, capsys):
    log = tmp_path / "tmin.log"
    assert main(["--log-level", "INFO", "--log-file", str(log), "verify", "encoder"]) == 0
    assert "self_attn" not in log.read_text(encoding="utf-8")


@pytest.mark.parametrize("before", [True, False], ids=["config-first", "config-after"])
def test_config_option_before_or_after_subcommand(at_repo_root, tmp_path, capsys, before):
    path = write_config(tmp_path, TINY_ATTENTION)
    argv = ["--config", str(path), "verify", "attention"] if before else ["verify", "attention", "--config", str(path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"config: {path}")
    # the file's [attention] sizes, not the shipped 6 x 512
    assert "input   (batch, seq_len, d_model)    = (1, 4, 32)   sentence 0: (4, 32)" in out
    assert "weights (batch, h, seq_len, seq_len) = (1, 4, 4, 4)   sentence 0: (4, 4, 4)" in out


def test_tmin_config_env_is_used(at_repo_root, tmp_path, capsys, monkeypatch):
    path = write_config(tmp_path, TINY_ATTENTION)
    monkeypatch.setenv("TMIN_CONFIG", str(path))
    assert main(["verify", "attention"]) == 0
    assert capsys.readouterr().out.startswith(f"config: {path}")


def test_verify_list(at_repo_root, capsys):
    assert main(["verify", "--list"]) == 0
    out = capsys.readouterr().out
    assert "positional.test_vectors" in out and "transformer_min.model.embeddings.sinusoidal_table" in out


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: tmin" in out and "verify" in out and "--config" in out
    assert main([]) == 0  # no subcommand: help, exit 0
    assert "usage: tmin" in capsys.readouterr().out


def test_verify_help_lists_stages(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "attention, multihead, positional" in out


def test_plain_verify_script_runs(repo_root, child_env):
    proc = subprocess.run([sys.executable, "verify/check_attention.py"], cwd=repo_root, env=child_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\d+ passed, 0 failed$", proc.stdout, flags=re.M)
    assert "== attention:" in proc.stdout and "== multihead:" in proc.stdout


def test_help_does_not_import_torch(repo_root, child_env):
    """`tmin --help` answers without importing torch (handlers import it)."""
    code = ("import sys; from transformer_min.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=child_env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "NO-TORCH"


def test_log_records_go_to_the_current_stderr(monkeypatch):
    import io
    import logging

    from transformer_min.cli.main import CurrentStderrHandler

    handler = CurrentStderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler.handle(logging.makeLogRecord({"msg": "one"}))
    first.close()  # what pytest's capture does to a stream after the test that made the handler
    monkeypatch.setattr(sys, "stderr", second)
    handler.handle(logging.makeLogRecord({"msg": "two"}))
    assert second.getvalue() == "two\n"


def test_verify_attention_in_chinese(at_repo_root, capsys):
    assert main(["verify", "attention", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("配置文件：config.toml")
    assert "== attention：缩放点积注意力" in out
    # the posts' labels (post 000: 输入形状 / 输出形状 / 注意力权重形状 / 每行权重和)
    for label in ("输入形状", "输出形状", "注意力权重形状", "每行权重和"):
        assert label in out
    # verdicts in Chinese; the claim keeps the English beside its translation
    assert '[通过] attention.weights_rows_sum_to_one (3.2.1, eq. (1)): softmax 沿键（key）轴：每行权重和为 1 ' \
           '("softmax over the key axis: every weight row sums to 1")' in out
    assert "[PASS]" not in out
    assert re.search(r"^6 项通过，0 项失败$", out, flags=re.M)


@pytest.mark.parametrize("how", ["settings", "locale"])
def test_language_from_settings_or_locale(at_repo_root, tmp_path, capsys, monkeypatch, how):
    args = ["verify", "positional"]
    if how == "settings":
        path = tmp_path / "settings.json"
        path.write_text('{"language": "zh"}', encoding="utf-8")
        args += ["--settings", str(path)]
    else:
        monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert main(args) == 0
    assert "项通过" in capsys.readouterr().out
    assert main([*args, "--lang", "en"]) == 0  # --lang wins
    assert re.search(r"^5 passed, 0 failed$", capsys.readouterr().out, flags=re.M)


def test_bad_lang_is_one_line(at_repo_root, capsys):
    assert main(["verify", "attention", "--lang", "fr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --lang: language 'fr' is not one of en, zh; fix: --lang zh")
    assert len(err.strip().splitlines()) == 1


def read_csv(path):
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], [r[0] for r in rows[1:]], [[float(x) for x in r[1:]] for r in rows[1:]]


def test_verify_attention_csv_one_matrix_per_head(at_repo_root, tmp_path, capsys):
    """--csv DIR: one query x key CSV per head of sentence 0, equal to torch.nn.MultiheadAttention's per-head
    weights with the same parameters (an independent implementation)."""
    import torch

    from transformer_min.channel.schema import SECTIONS
    from transformer_min.core.project import load_project
    from transformer_min.verify.checks.attention import demo
    from transformer_min.verify.checks.multihead import copy_attention_weights
    from transformer_min.verify.registry import Context

    out_dir = tmp_path / "csv"
    assert main(["verify", "attention", "--csv", str(out_dir)]) == 0
    assert "8 matrix CSV files (rows = queries, columns = keys)" in capsys.readouterr().out
    assert sorted(p.name for p in out_dir.iterdir()) == [f"attention_head{h}.csv" for h in range(8)]

    d = demo(Context(load_project("config.toml", sections=SECTIONS).config))
    ref = torch.nn.MultiheadAttention(512, 8, batch_first=True).eval()
    copy_attention_weights(d["mha"], ref)
    with torch.no_grad():
        _, w = ref(d["x"], d["x"], d["x"], need_weights=True, average_attn_weights=False)  # (B, H, L, L)
    for h in range(8):
        header, rows, values = read_csv(out_dir / f"attention_head{h}.csv")
        assert header == ["query \\ key", *(f"pos{j}" for j in range(6))]
        assert rows == [f"pos{i}" for i in range(6)]
        assert torch.allclose(torch.tensor(values), w[0, h], atol=1e-5)
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")]  # no temp files left


def test_verify_decoder_csv_has_the_causal_weights(at_repo_root, tmp_path, capsys):
    out_dir = tmp_path / "csv"
    assert main(["verify", "decoder", "--csv", str(out_dir)]) == 0
    header, rows, values = read_csv(out_dir / "decoder_self_attn_head0.csv")
    assert len(header) == 17 and len(rows) == 16  # [verify] seq_len 16, whole
    assert all(values[i][j] == 0 for i in range(16) for j in range(i + 1, 16))
    assert all(abs(sum(r) - 1) < 1e-5 for r in values)
    assert len(list(out_dir.glob("decoder_self_attn_head*.csv"))) == 8


def test_csv_into_a_file_is_one_line(at_repo_root, tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("x", encoding="utf-8")
    assert main(["verify", "attention", "--csv", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --csv {target}: is a file, not a folder; fix:")
    assert len(err.strip().splitlines()) == 1


def test_trace_at_info(at_repo_root, tmp_path, capsys):
    log = tmp_path / "trace.log"
    assert main(["verify", "encoder", "full", "--trace", "--log-file", str(log)]) == 0
    text = log.read_text(encoding="utf-8")
    assert re.search(r"^INFO transformer_min.model.layers: pass 1 encoder_layer\.self_attn\s+-> \(2, 16, 512\)$", text,
                     flags=re.M)
    # the full model names each of its 6 layers; logits_shape is its first pass, causality the 2nd and 3rd
    for p in (1, 2, 3):
        assert re.search(rf"pass {p} encoder\.layers\.5\.self_attn\s+-> \(2, 16, 512\)", text)
        assert re.search(rf"pass {p} decoder\.layers\.0\.cross_attn\s+-> \(2, 16, 512\)", text)
    assert "DEBUG" not in text
    assert main(["verify", "encoder", "--log-file", str(log)]) == 0  # without --trace: not at INFO
    assert "self_attn" not in log.read_text(encoding="utf-8")


def test_decode_csv_writes_the_cross_attention_per_head(tmp_path, capsys):
    import torch

    from transformer_min.core.config import Config, ModelConfig, VocabConfig
    from transformer_min.model.transformer import build_model
    from transformer_min.training.checkpoint import save_checkpoint

    cfg = Config(model=ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, dropout=0.0, max_len=64),
                 vocab=VocabConfig(src_size=12, tgt_size=12))
    torch.manual_seed(0)
    ckpt = save_checkpoint(tmp_path / "tiny.pt", model=build_model(cfg), cfg=cfg, step=0)
    out_dir = tmp_path / "att"
    assert main(["decode", "--checkpoint", str(ckpt), "3 5 7", "--csv", str(out_dir)]) == 0
    output = capsys.readouterr().out.splitlines()[0].split()
    assert sorted(p.name for p in out_dir.iterdir()) == ["cross_attn_head0.csv", "cross_attn_head1.csv",
                                                         "cross_attn_mean.csv"]
    heads = []
    for name in ("cross_attn_head0.csv", "cross_attn_head1.csv"):
        header, rows, values = read_csv(out_dir / name)
        assert header == ["query \\ key", "3", "5", "7", "2"]  # source ids + EOS
        assert rows == [*output, "2"]  # output tokens + EOS
        assert all(abs(sum(r) - 1) < 1e-5 for r in values)  # softmax over the source positions
        heads.append(values)
    _, _, mean = read_csv(out_dir / "cross_attn_mean.csv")
    assert all(abs(m - (a + b) / 2) < 2e-6 for ra, rb, rm in zip(*heads, mean) for a, b, m in zip(ra, rb, rm))


def test_decode_attention_prints_the_mean_cross_attention(tmp_path, capsys):
    """--attention: a header of source ids + EOS, then one row per output token + EOS whose weights are a
    softmax over the source positions (section 3.2.3), each printed to 2 decimals."""
    import torch

    from transformer_min.core.config import Config, ModelConfig, VocabConfig
    from transformer_min.model.transformer import build_model
    from transformer_min.training.checkpoint import save_checkpoint

    cfg = Config(model=ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, dropout=0.0, max_len=64),
                 vocab=VocabConfig(src_size=12, tgt_size=12))
    torch.manual_seed(0)
    ckpt = save_checkpoint(tmp_path / "tiny.pt", model=build_model(cfg), cfg=cfg, step=0)
    assert main(["decode", "--checkpoint", str(ckpt), "3,5,7", "--attention"]) == 0
    lines = capsys.readouterr().out.splitlines()
    output = lines[0].split()
    assert lines[2] == "cross-attention (last layer, mean over heads); rows = output + EOS, columns = source"
    assert lines[3].split() == ["3", "5", "7", "2"]
    rows = [line.split() for line in lines[4:]]
    assert [r[0] for r in rows] == [*output, "2"] and all(len(r) == 5 for r in rows)
    assert all(abs(sum(map(float, r[1:])) - 1) <= 0.02 for r in rows)  # four weights rounded to 0.01


def test_each_verb_is_registered_by_the_module_of_its_layer():
    """eval, translate and decode are translation verbs (cli/translate.py); average is a training verb
    (cli/train.py); data prepare stays in cli/data.py."""
    from transformer_min.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    where = {name: sub[name].get_default("func").__module__ for name in ("eval", "translate", "decode", "average")}
    assert where == {"eval": "transformer_min.cli.translate", "translate": "transformer_min.cli.translate",
                     "decode": "transformer_min.cli.translate", "average": "transformer_min.cli.train"}
    prepare = parser.parse_args(["data", "prepare"]).func
    assert prepare.__module__ == "transformer_min.cli.data"


# ------------------------------------------------------------------------------------------------
# issue 15: the configurations of the four posts (mapped, not copied) run their stage with exit 0
# ------------------------------------------------------------------------------------------------

POST_000_ATTENTION = ("[attention]\nd_model = 512\nnum_heads = 8\nd_k = 64\nd_v = 64\n"
                      "seq_len = 6\nbatch_size = 2\nseed = 42\n")
POST_001_ATTENTION = "[attention]\nd_model = 64\nn_heads = 4\nseq_len = 8\nbatch_size = 2\n"
POST_002_MODEL = ("[model]\nd_model = 512\nnum_heads = 8\nd_ff = 2048\nnum_layers = 6\ndropout = 0.1\nmax_len = 128\n"
                  "[vocab]\nsrc_vocab_size = 1000\ntgt_vocab_size = 1000\n"
                  "[verify]\nseq_len = 16\nbatch_size = 2\nseed = 42\n")


@pytest.mark.parametrize("text,shape", [
    (POST_000_ATTENTION, "weights (batch, h, seq_len, seq_len) = (2, 8, 6, 6)   sentence 0: (8, 6, 6)"),
    (POST_000_ATTENTION.replace("num_heads = 8\nd_k = 64\nd_v = 64\n", "num_heads = 1\n"), "sentence 0: (1, 6, 6)"),
    (POST_000_ATTENTION.replace("seq_len = 6", "seq_len = 20"), "sentence 0: (8, 20, 20)"),
    (POST_001_ATTENTION, "weights (batch, h, seq_len, seq_len) = (2, 4, 8, 8)   sentence 0: (4, 8, 8)"),  # used to stop on d_k 64 != 16
    (POST_001_ATTENTION.replace("n_heads = 4", "n_heads = 8"), "sentence 0: (8, 8, 8)"),
    (POST_001_ATTENTION.replace("seq_len = 8", "seq_len = 16"), "sentence 0: (4, 16, 16)"),
], ids=["000", "000-1-head", "000-seq-20", "001", "001-8-heads", "001-seq-16"])
def test_posts_attention_configs_run_the_attention_stage(tmp_path, capsys, text, shape):
    path = write_config(tmp_path, text)
    assert main(["verify", "attention", "--config", str(path)]) == 0
    captured = capsys.readouterr()
    assert shape in captured.out and "[FAIL]" not in captured.out


def test_post_002_config_with_its_key_names(tmp_path, capsys):
    path = write_config(tmp_path, POST_002_MODEL)
    settings = tmp_path / "settings.json"  # the post's settings.json, base_url spelling of the other post
    settings.write_text('{"base_url": "https://taotoken.net/api", "api_key": "YOUR_TAOTOKEN_API_KEY", '
                        '"model": "default", "timeout": 30, "log_level": "INFO"}', encoding="utf-8")
    assert main(["verify", "multihead", "--config", str(path), "--settings", str(settings)]) == 0
    captured = capsys.readouterr()
    assert "[FAIL]" not in captured.out
    assert "src_vocab_size read as src_size" in captured.err and "'base_url' read as 'api_base'" in captured.err


def test_post_003_flat_json_hyperparameters(tmp_path, capsys):
    import json

    path = tmp_path / "hparams.json"
    path.write_text(json.dumps({"d_model": 512, "num_heads": 8, "d_k": 64, "d_v": 64, "d_ff": 2048,
                                "num_layers": 6, "dropout": 0.1, "max_seq_length": 5000, "warmup_steps": 4000,
                                "label_smoothing": 0.1}), encoding="utf-8")
    assert main(["verify", "multihead", "--config", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"config: {path}" in captured.out and "[FAIL]" not in captured.out
    assert "[train] warmup_steps, label_smoothing" in captured.err


def test_log_file_in_a_missing_folder(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "tmin.log"
    assert main(["--log-file", str(target), "verify", "--list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --log-file {target}: the folder {target.parent} does not exist")
    assert "mkdir -p" in err and not (tmp_path / "no").exists()


def test_a_bad_settings_file_leaves_an_existing_log_file_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "settings.json").write_text('{"log_level": "LOUD"}', encoding="utf-8")
    log = tmp_path / "old.log"
    log.write_text("yesterday's log\n", encoding="utf-8")
    assert main(["--log-file", str(log), "verify", "--list"]) == 2
    assert "settings.log_level" in capsys.readouterr().err
    assert log.read_text(encoding="utf-8") == "yesterday's log\n"  # not truncated by a failed start


@pytest.mark.parametrize("lang,prefix", [("en", "LLM review skipped: "), ("zh", "跳过大模型复核：")])
def test_verify_llm_with_only_a_settings_json(tmp_path, capsys, monkeypatch, lang, prefix):
    """A folder with the post's settings.json and no config.toml: `tmin verify` runs on the built-in defaults, so
    the --llm review must not stop on 'config.toml: config file not found'; with the post's placeholder key it is
    skipped, naming the placeholder, in the reader's language."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    monkeypatch.delenv("TMIN_API_KEY", raising=False)
    (tmp_path / "settings.json").write_text(
        '{"base_url": "https://taotoken.net/api", "api_key": "YOUR_TAOTOKEN_API_KEY", "model": "default", '
        '"timeout": 30}', encoding="utf-8")
    assert main(["verify", "attention", "--llm", "--lang", lang]) == 0
    out = capsys.readouterr().out
    assert "config file not found" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith(prefix) and "'YOUR_TAOTOKEN_API_KEY'" in last and ("placeholder" in last or "占位符" in last)
