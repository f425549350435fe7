"""Each post's staged check prints the shapes that post prints (issue 15 item 3).

The expected shapes are the ones the four posts in ../shared/seeds show (named by title in docs/zh/posts.md),
not our own output replayed. The first configs use our canonical key names (num_heads, [vocab] src_size);
the posts' own files (post 003's flat JSON, the whole config.toml of posts 000 and 001 with their [taotoken]
tables and key names) and the one-value changes the posts suggest run at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from transformer_min.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

# post 001 ("用 TaoToken 统一 Key 跑通多头注意力最小验证", the OpenAI-compatible one): d_model 64, 4 heads,
# seq_len 8, batch 2. d_k/d_v are explicit until [attention] derives them (issue 15 item 1).
POST_001 = """\
[attention]
d_model = 64
num_heads = {heads}
d_k = {d_k}
d_v = {d_k}
seq_len = {seq_len}
batch_size = 2
"""

# The base sizes both post 002 and post 003 write out.
BASE_MODEL = """\
[model]
d_model = 512
num_heads = 8
d_ff = 2048
num_layers = 6
dropout = 0.1
"""

# post 002 (the full PyTorch model with check_attention / check_encoder / check_full): the base sizes,
# vocabulary 1000, [verify] seq_len 16, batch 2.
POST_002 = BASE_MODEL + """\
max_len = 128

[vocab]
src_size = 1000
tgt_size = 1000

[verify]
seq_len = 16
batch_size = 2
seed = 42
"""

# post 003 (PyTorch multi-head attention with masks): base sizes; its staged check uses batch 2, seq_len 10.
POST_003 = BASE_MODEL + """\

[verify]
seq_len = 10
batch_size = 2
"""


def verify(tmp_path, capsys, text: str, *stages: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["verify", *stages, "--config", str(path)]) == 0
    return capsys.readouterr().out


def matrix_after(out: str, heading: str) -> list[list[str]]:
    """The rows printed under the line that starts with `heading`."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if not re.fullmatch(r"\s+[0-9. ]+", line):
            break
        rows.append(line.split())
    return rows


def test_post_000_demo_shapes(repo_root, monkeypatch, capsys):
    """Post 000 (NumPy multi-head attention): input (6, 512), output (6, 512), weights (8, 6, 6), head 0 rounded
    to 4 decimals, row sums rounded to 6."""
    monkeypatch.chdir(repo_root)
    assert main(["verify", "attention"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"input .*= \(2, 6, 512\)\s+sentence 0: \(6, 512\)", out)
    assert re.search(r"weights \(batch, h, seq_len, seq_len\) = \(2, 8, 6, 6\)\s+sentence 0: \(8, 6, 6\)", out)
    assert re.search(r"output .*= \(2, 6, 512\)\s+sentence 0: \(6, 512\)", out)
    rows = matrix_after(out, "head 0 weights, sentence 0 (6x6, 4 decimals)")
    assert len(rows) == 6 and all(len(r) == 6 and all(re.fullmatch(r"\d\.\d{4}", v) for v in r) for r in rows)
    assert "head 0 row sums (6 decimals): " + " ".join(["1.000000"] * 6) in out


@pytest.mark.parametrize("heads,d_k,seq_len", [(4, 16, 8), (8, 8, 8), (4, 16, 16)],
                         ids=["as-posted", "heads-4-to-8", "seq_len-8-to-16"])
def test_post_001_batched_shapes(tmp_path, capsys, heads, d_k, seq_len):
    """Post 001 prints scores and attn (2, 4, 8, 8) and output (2, 8, 64); and suggests 4 -> 8 heads, 8 -> 16."""
    out = verify(tmp_path, capsys, POST_001.format(heads=heads, d_k=d_k, seq_len=seq_len), "attention")
    weights = f"(2, {heads}, {seq_len}, {seq_len})"
    assert f"scores  (batch, h, seq_len, seq_len) = {weights}" in out
    assert f"weights (batch, h, seq_len, seq_len) = {weights}" in out
    assert f"output  (batch, seq_len, d_model)    = (2, {seq_len}, 64)" in out


def test_post_000_suggestions_one_head_and_seq_len_20(tmp_path, capsys):
    """Post 000 suggests 1 head, and seq_len 20: a 20 x 20 matrix is cut to 16 and the output says so."""
    one_head = "[attention]\nnum_heads = 1\nd_k = 512\nd_v = 512\n"
    assert "sentence 0: (1, 6, 6)" in verify(tmp_path, capsys, one_head, "attention")
    out = verify(tmp_path, capsys, "[attention]\nseq_len = 20\n", "attention")
    assert "sentence 0: (8, 20, 20)" in out
    assert "head 0 weights, sentence 0 (20x20, 4 decimals; cut to the first 16 rows and columns, " \
           "the whole matrix: --csv DIR):" in out
    rows = matrix_after(out, "head 0 weights, sentence 0 (20x20")
    assert len(rows) == 16 and all(len(r) == 16 for r in rows)


def test_post_002_check_attention_script(repo_root, tmp_path, child_env):
    """Post 002's check_attention: eq. (1) alone gives output (2, 4, 8) and weights (2, 4, 4); its multi-head
    check gives input and output (2, 16, 512)."""
    path = tmp_path / "config.toml"
    path.write_text(POST_002, encoding="utf-8")
    proc = subprocess.run([sys.executable, "verify/check_attention.py", "--config", str(path)], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "output  (batch, seq_len, d_v)     = (2, 4, 8)" in out
    assert "weights (batch, seq_len, seq_len) = (2, 4, 4)" in out
    assert "== multihead:" in out
    assert "input   (batch, seq_len, d_model)    = (2, 16, 512)" in out
    assert "output  (batch, seq_len, d_model)    = (2, 16, 512)" in out


def test_post_002_encoder_and_full(tmp_path, capsys):
    """Post 002's check_encoder (PE on zeros (1, 16, 512) in [-1, 1]; encoder input/output (2, 16, 512), not
    (2, 19, 512)) and check_full (output (2, 16, 1000))."""
    out = verify(tmp_path, capsys, POST_002, "positional", "encoder", "decoder", "full")
    m = re.search(r"zeros \(1, seq_len, d_model\) = \(1, 16, 512\) \+ PE: range \[(-?[\d.]+), (-?[\d.]+)\]; "
                  r"sum \|PE\(pos 0\) - PE\(pos 1\)\| = ([\d.]+)", out)
    assert m and -1 <= float(m.group(1)) < 0 < float(m.group(2)) <= 1 and float(m.group(3)) > 1
    assert "input (batch, seq_len, d_model) = (2, 16, 512)" in out
    assert "output (batch, seq_len, d_model) = (2, 16, 512)" in out
    assert "(2, 19, 512)" not in out.split("== decoder:")[0]  # the encoder stage shows no unexplained 19
    assert "memory (batch, S, d_model) = (2, 19, 512): S = seq_len + 3" in out  # the decoder says why
    assert "output logits (batch, T, tgt_vocab) = (2, 16, 1000)" in out


def test_post_003_shapes_and_whole_causal_matrix(tmp_path, capsys):
    """Post 003: weights (2, 8, 10, 10), outputs (2, 10, 512), the causal matrix 10 x 10 whole."""
    out = verify(tmp_path, capsys, POST_003, "multihead", "encoder", "decoder")
    assert "weights (batch, h, seq_len, seq_len) = (2, 8, 10, 10)" in out
    assert "output  (batch, seq_len, d_model)    = (2, 10, 512)" in out
    assert "LayerNorm(x + FFN(x)) (2, 10, 512)" in out
    rows = matrix_after(out, "head 0 masked self-attention weights, sentence 0 (10x10, 4 decimals)")
    assert len(rows) == 10 and all(len(r) == 10 for r in rows)
    assert all(float(v) == 0 for i, r in enumerate(rows) for v in r[i + 1:])  # lower-triangular, printed whole
    assert "cut to" not in out


def test_one_rounding_rule(repo_root, monkeypatch, capsys):
    """Every printed weight matrix uses 4 decimals, every row sum 6 (posts 000's np.round(w, 4) and (…, 6))."""
    monkeypatch.chdir(repo_root)
    assert main(["verify", "attention", "multihead", "decoder"]) == 0
    out = capsys.readouterr().out
    headings = [line for line in out.splitlines() if "weights, sentence 0 (" in line]
    assert len(headings) == 3 and all("4 decimals" in h for h in headings)
    cells = {v for line in out.splitlines() if re.fullmatch(r"\s+[0-9. ]+", line) and "." in line
             for v in line.split()}
    assert cells and all(re.fullmatch(r"\d\.\d{4}", v) for v in cells)
    sums = [line for line in out.splitlines() if "row sums" in line and not line.startswith("[")]
    assert sums and all("(6 decimals)" in s for s in sums)


# post 003's JSON of hyperparameters as it prints it (d_k = d_v = 64 written out), plus the batch 2, seq_len 10
# of its staged check.
POST_003_JSON = {"d_model": 512, "num_heads": 8, "d_k": 64, "d_v": 64, "d_ff": 2048, "num_layers": 6,
                 "dropout": 0.1, "max_seq_length": 5000, "warmup_steps": 4000, "label_smoothing": 0.1,
                 "seq_len": 10, "batch_size": 2}


@pytest.mark.parametrize("key,value", [("num_heads", 8), ("num_heads", 1), ("num_heads", 4), ("num_heads", 16),
                                       ("num_heads", 5), ("d_model", 256), ("d_k", 512)],
                         ids=["as-posted", "1-head", "4-heads", "16-heads", "5-heads", "d_model-256", "d_k-512"])
def test_post_003_json_with_one_value_changed(tmp_path, capsys, key, value):
    """Change one value of post 003's JSON (the heads experiments of posts 000/001, its own 'set d_k to 512'):
    the d_k and d_v it writes out stay as written with a note (as [attention] does), and the multihead, encoder
    and decoder stages run with exit 0 and the new head count in every weights shape."""
    import json

    path = tmp_path / "hparams.json"
    path.write_text(json.dumps(dict(POST_003_JSON, **{key: value})), encoding="utf-8")
    assert main(["verify", "multihead", "encoder", "decoder", "--config", str(path)]) == 0
    captured = capsys.readouterr()
    heads = value if key == "num_heads" else 8
    assert f"weights (batch, h, seq_len, seq_len) = (2, {heads}, 10, 10)" in captured.out
    assert f"masked self-attention weights (batch, h, T, T) = (2, {heads}, 10, 10)" in captured.out
    assert "[FAIL]" not in captured.out
    changed = (key, value) != ("num_heads", 8)
    assert ("kept as written (model.free_head_dims)" in captured.err) == changed
    if changed:  # torch's layers cannot hold these head sizes: said, not failed, and never shown as passed
        assert "-- not run: d_k * h or d_v * h != d_model" in captured.out
        assert "[SKIP] encoder.matches_torch_layer" in captured.out and "skipped (not run)" in captured.out


# The config.toml files of posts 000 and 001 whole, as their readers paste them: the [taotoken] table with its
# placeholder key, `model` / `default_model`, `timeout`, and the comments of post 001 (config values only).
POST_000_TOML = """\
# config.toml
[taotoken]
base_url = "https://taotoken.net/api"
api_key = "sk-你的TaoTokenKey"
model = "claude-3-5-sonnet"
timeout = 60

[attention]
d_model = 512
num_heads = 8
d_k = 64
d_v = 64
seq_len = 6
batch_size = 2
seed = 42
"""
POST_001_TOML = """\
# config.toml
[taotoken]
# API 地址（不带 UTM，固定这个）
base_url = "https://taotoken.net/api"
# 从 api-keys 页面复制，不要提交到 git
api_key = "sk-你的实际key"
# 默认模型（读论文验证时用轻量模型即可）
default_model = "gpt-4o-mini"
# 请求超时（秒）
timeout = 60

[attention]
# 自注意力示例的超参
d_model = 64
n_heads = 4
seq_len = 8
batch_size = 2
"""


@pytest.mark.parametrize("text,old,new,weights,output", [
    (POST_000_TOML, "", "", "(2, 8, 6, 6)", "(2, 6, 512)"),
    (POST_000_TOML, "num_heads = 8", "num_heads = 1", "(2, 1, 6, 6)", "(2, 6, 512)"),  # d_k = 64 kept, noted
    (POST_000_TOML, "seq_len = 6", "seq_len = 20", "(2, 8, 20, 20)", "(2, 20, 512)"),
    (POST_001_TOML, "", "", "(2, 4, 8, 8)", "(2, 8, 64)"),
    (POST_001_TOML, "n_heads = 4", "n_heads = 8", "(2, 8, 8, 8)", "(2, 8, 64)"),
    (POST_001_TOML, "seq_len = 8", "seq_len = 16", "(2, 4, 16, 16)", "(2, 16, 64)"),
    (POST_001_TOML, "timeout = 60", "timeout = 120", "(2, 4, 8, 8)", "(2, 8, 64)"),  # its timeout advice
], ids=["000", "000-1-head", "000-seq-20", "001", "001-8-heads", "001-seq-16", "001-timeout-120"])
def test_posts_whole_config_toml_files(tmp_path, capsys, monkeypatch, text, old, new, weights, output):
    """The posts' whole config.toml in the reader's folder (no --config): `tmin verify attention --lang zh` exits 0
    with the post's shapes under the posts' labels; the [taotoken] table and its placeholder key do not block it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text(text.replace(old, new) if old else text, encoding="utf-8")
    assert main(["verify", "attention", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert f"注意力权重形状 (batch, h, seq_len, seq_len) = {weights}" in out
    assert f"输出形状 (batch, seq_len, d_model)    = {output}" in out
    assert "第 0 个头每行权重和（保留 6 位小数）：1.000000" in out and "[失败]" not in out


def test_post_002_longer_seq_len_than_max_len_is_one_config_error(tmp_path, capsys):
    """Post 002 warns: a longer seq_len needs a larger max_len. Forgetting it is a config to fix, said once before
    any check runs (exit 2, naming both keys), not two paper claims that FAIL; and so in every stage that
    builds positions (issue 24: `encoder` alone once printed shapes from a table too short for them)."""
    path = tmp_path / "config.toml"
    path.write_text(POST_002.replace("seq_len = 16", "seq_len = 200"), encoding="utf-8")
    assert main(["verify", "positional", "encoder", "decoder", "full", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert "[FAIL]" not in captured.out and "== " not in captured.out
    assert ("verify.seq_len = 200 is longer than model.max_len = 128" in captured.err
            and "raise model.max_len (max_seq_length) to at least 200" in captured.err)
    for stage in ("positional", "encoder", "decoder"):
        assert main(["verify", stage, "--config", str(path)]) == 2, stage
        assert "model.max_len = 128" in capsys.readouterr().err
