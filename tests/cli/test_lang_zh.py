"""`--lang zh` end to end (issue 24): every command takes it, errors and their fixes are Chinese and exit non-zero,
the language comes from --lang, then settings.json "language", then the locale, and a skipped check is never
counted as a pass. The English-prose detector is `tests/cli/english_prose.py`."""

from __future__ import annotations

import logging

import pytest

from transformer_min.cli.main import main
from transformer_min.core.i18n import prescan_language

from .english_prose import english_run, prose_lines, prose_share

pytestmark = pytest.mark.usefixtures("restore_logging", "clean_tmin_env")

SMALL_MODEL = ("[model]\nd_model = 32\nnum_heads = 4\nd_ff = 64\nnum_layers = 2\nmax_len = 64\n"
               "[vocab]\nsrc_size = 50\ntgt_size = 50\n[verify]\nseq_len = 8\nbatch_size = 2\n")
# Post 003's experiment of other head sizes: d_k * h != d_model, which torch's layers cannot hold.
FREE_HEADS = SMALL_MODEL.replace("num_heads = 4\n", "num_heads = 4\nd_k = 4\nd_v = 4\nfree_head_dims = true\n")
# Post 002's experiment: a sequence longer than the positional encoding table.
LONG_SEQ = SMALL_MODEL.replace("seq_len = 8", "seq_len = 200")


@pytest.fixture
def no_key(monkeypatch):
    for name in ("TAOTOKEN_API_KEY", "TMIN_API_KEY", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch, no_key):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals (an unknown argument) exit through SystemExit
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------ the detector itself
@pytest.mark.parametrize("line", [
    "error: nh5.toml: attention.num_heads: 5 does not divide d_model 64",
    "LLM review skipped: no key configured; to enable it, set TAOTOKEN_API_KEY",
    "[通过] ffn.position_wise (3.3): applied to each position separately and identically",
    # --help (issue 38): argparse's own words and an option's text left in English
    "  -h, --help            show this help message and exit",
    "  --llm                 afterwards, ask the configured LLM to review the",
    "                        attention weights printed above (advisory)",
    "Run every check of the paper, stage by stage; exit 1 on any FAIL.",
])
def test_detector_flags_english_prose(line):
    assert english_run(line)


@pytest.mark.parametrize("line", [
    "错误：nh5.toml: attention.num_heads: 5 不能整除 d_model 64（d_k = d_v = d_model / h，论文 3.2.2）",
    '[通过] attention.row_sums (3.2.1): 每行权重和为 1 ("softmax over the key axis: every weight row sums to 1")',
    "  输入形状 (batch, seq_len, d_model)    = (2, 6, 512)   第 0 句：(6, 512)",
    "错误：--set 'attention.num_heads'：格式应为 SECTION.KEY=VALUE；修复：例如 --set attention.num_heads=4",
    "通道      https://taotoken.net/api/v1/chat/completions",
    # --help (issue 38): usage, option names, choices, metavars and the paper's title in title marks stay as written
    "用法： tmin verify [-h] [--config PATH] [--settings PATH] [--log-level LEVEL]",
    "  --compute-type {default,float32,int8,int8_float32,float16,bfloat16,int8_bfloat16}",
    "  --set SECTION.KEY=VALUE",
    "  --csv DIR             把打印出的每个注意力矩阵写成 CSV，每个头一个文件（行 = 查询，列 = 键）",
    "                        `tmin export --ctranslate2` 导出的目录（--model），其",
    "《Attention Is All You Need》：逐条核对过、可以训练的 PyTorch 代码。",
])
def test_detector_passes_chinese_with_code_paths_and_keys(line):
    assert english_run(line) is None


# ------------------------------------------------------------------------------------ where the language comes from
def test_language_prescan_order(tmp_path):
    settings = tmp_path / "s.json"
    settings.write_text('{"language": "zh"}', encoding="utf-8")
    assert prescan_language(["verify", "--lang", "en", "--settings", str(settings)], {"LANG": "zh_CN.UTF-8"}) == "en"
    assert prescan_language(["verify", f"--settings={settings}"], {"LANG": "en_US.UTF-8"}) == "zh"
    assert prescan_language(["verify"], {"LANG": "zh_CN.UTF-8"}) == "zh"
    assert prescan_language(["verify"], {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}) == "en"
    assert prescan_language(["verify", "--lang", "xx"], {"LANG": "zh_CN.UTF-8"}) == "zh"  # reported once parsed


# ------------------------------------------------------------------------------------ errors: Chinese, non-zero
ERROR_CASES = {
    "invalid-head-count": (["verify", "attention", "--config", "c.toml"], {"c.toml": "[attention]\nd_model = 64\nnum_heads = 5\n"}),
    "model-head-count": (["verify", "multihead", "--config", "c.toml"], {"c.toml": SMALL_MODEL.replace("num_heads = 4", "num_heads = 3")}),
    "set-not-an-int": (["verify", "attention", "--set", "attention.num_heads=abc"], {}),
    "set-no-equals": (["verify", "attention", "--set", "attention.num_heads"], {}),
    "set-no-value": (["verify", "attention", "--set", "attention.num_heads="], {}),
    "set-unknown-section": (["verify", "attention", "--set", "atention.num_heads=4"], {}),
    "set-unknown-key": (["verify", "attention", "--set", "model.d_modle=64"], {}),
    "set-dropout-range": (["verify", "ffn", "--set", "model.dropout=1.5"], {}),
    "set-positional-choice": (["verify", "ffn", "--set", "model.positional=circular"], {}),
    "toml-pasted-from-post": (["verify", "attention", "--config", "c.toml"], {"c.toml": "[attention]\nd_model 512\nnum_heads = 8\n"}),
    "config-missing": (["verify", "attention", "--config", "missing.toml"], {}),
    "seq-len-positional": (["verify", "positional", "--config", "c.toml"], {"c.toml": LONG_SEQ}),
    "seq-len-encoder": (["verify", "encoder", "--config", "c.toml"], {"c.toml": LONG_SEQ}),
    "seq-len-decoder": (["verify", "decoder", "--config", "c.toml"], {"c.toml": LONG_SEQ}),
    "seq-len-full": (["verify", "full", "--config", "c.toml"], {"c.toml": LONG_SEQ}),
    "unknown-stage": (["verify", "attentoin"], {}),
    "pad-equals-bos": (["verify", "ffn", "--set", "vocab.bos_id=0"], {}),
    "channel-no-key": (["channel", "check"], {}),
    "channel-placeholder-key": (["channel", "check", "--settings", "s.json"], {"s.json": '{"api_key": "sk-你的TaoTokenKey"}'}),
    "ask-empty-question": (["ask", " "], {}),
    "log-file-is-a-folder": (["verify", "--list", "--log-file", "."], {}),
    "settings-bad-log-level": (["verify", "--list", "--settings", "s.json"], {"s.json": '{"log_level": "LOUD"}'}),
    "settings-unknown-key": (["verify", "--list", "--settings", "s.json"], {"s.json": '{"languge": "zh"}'}),
    "csv-is-a-file": (["verify", "attention", "--csv", "c.toml"], {"c.toml": "[attention]\nseq_len = 4\n"}),
    "report-unknown-stage": (["report", "attentoin", "--out", "r"], {}),
    "train-overwrite-resume": (["train", "--overwrite", "--resume", "runs/x"], {}),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_are_chinese_and_non_zero(case, in_tmp, capsys):
    argv, files = ERROR_CASES[case]
    for name, text in files.items():
        (in_tmp / name).write_text(text, encoding="utf-8")
    code, out, err = run([*argv, "--lang", "zh"], capsys)
    assert code != 0, (case, out, err)
    error = [line for line in err.splitlines() if line.startswith("错误：")]
    assert error, err  # the one error line, with its Chinese prefix
    assert not prose_lines(out + err), prose_lines(out + err)


def test_seq_len_beyond_max_len_names_both_keys_and_the_fix(in_tmp, capsys):
    (in_tmp / "c.toml").write_text(LONG_SEQ, encoding="utf-8")
    for stage in ("positional", "encoder", "decoder", "multihead", "full"):
        code, out, err = run(["verify", stage, "--config", "c.toml"], capsys)
        assert code == 2 and "verify.seq_len = 200" in err and "model.max_len = 64" in err, (stage, err)
        assert "fix: raise model.max_len" in err and "(1, 200" not in out


# ------------------------------------------------------------------------------------ the channel, three ways to zh
def test_channel_check_takes_lang(in_tmp, capsys):
    code, out, err = run(["channel", "check", "--lang", "zh"], capsys)
    assert code == 3 and err.startswith("错误：没有配置密钥") and "TAOTOKEN_API_KEY" in err


def test_channel_check_follows_the_locale(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    code, out, err = run(["channel", "check"], capsys)
    assert code == 3 and err.startswith("错误：没有配置密钥") and not prose_lines(err)


def test_channel_check_follows_settings_language(in_tmp, capsys):
    (in_tmp / "settings.json").write_text('{"language": "zh"}', encoding="utf-8")
    code, out, err = run(["channel", "check"], capsys)
    assert code == 3 and err.startswith("错误：没有配置密钥") and not prose_lines(err)
    code, out, err = run(["channel", "check", "--lang", "en"], capsys)  # --lang wins over settings.json
    assert err.startswith("error: no key configured")


def test_channel_check_lines_in_chinese_until_the_request_fails(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-test-0123456789abcdef")
    code, out, err = run(["channel", "check", "--lang", "zh", "--set", "taotoken.base_url=http://127.0.0.1:9",
                          "--set", "taotoken.timeout=2"], capsys)
    assert code == 3 and "结果      失败" in out and err.startswith("错误：")
    assert "0123456789abcdef" not in out + err  # the key never in full
    assert not prose_lines(out + err), prose_lines(out + err)


# ------------------------------------------------------------------------------------ doctor, verify, --llm: the bar
def test_doctor_in_chinese(in_tmp, capsys):
    code, out, err = run(["doctor", "--lang", "zh", "--probe-seconds", "0"], capsys)
    assert code == 0 and "警告" in out
    english, lines = prose_share(out + err)
    assert english * 20 <= lines, prose_lines(out + err)


def test_verify_and_llm_notice_in_chinese(in_tmp, capsys):
    (in_tmp / "c.toml").write_text(SMALL_MODEL, encoding="utf-8")
    code, out, err = run(["verify", "attention", "multihead", "positional", "masking", "ffn", "--config", "c.toml",
                          "--llm", "--lang", "zh"], capsys)
    assert code == 0
    english, lines = prose_share(out + err)
    assert english * 20 <= lines, prose_lines(out + err)
    last = out.strip().splitlines()[-1]
    assert last.startswith("跳过大模型复核：没有配置密钥") and not english_run(last)
    assert "发送给模型" not in out  # nothing was sent


def test_log_lines_have_a_chinese_level_word_and_no_module_path(in_tmp, capsys):
    code, out, err = run(["verify", "--list", "--lang", "zh"], capsys)  # no config.toml here: a warning
    assert code == 0 and err.startswith("警告：") and "transformer_min" not in err
    logging.getLogger().handlers[0].flush()
    code, out, err = run(["verify", "--list", "--lang", "zh", "--log-level", "DEBUG"], capsys)
    assert "WARNING transformer_min.core.config:" in err  # at DEBUG the module path helps


# ------------------------------------------------------------------------------------ honest counts
def test_a_skipped_check_is_shown_as_skipped_and_never_counted_as_passed(in_tmp, capsys):
    (in_tmp / "c.toml").write_text(FREE_HEADS, encoding="utf-8")
    code, out, err = run(["verify", "multihead", "encoder", "decoder", "--config", "c.toml", "--lang", "zh"], capsys)
    assert code == 0
    for check in ("multihead.matches_torch", "encoder.matches_torch_layer", "decoder.matches_torch_layer"):
        line = next(line for line in out.splitlines() if f"] {check} " in line)
        assert line.startswith("[跳过]") and "未运行：" in line, line
    passed = sum(line.startswith("[通过]") for line in out.splitlines())
    assert out.strip().splitlines()[-1] == f"{passed} 项通过，0 项失败，3 项跳过（未运行）"


def test_a_stage_whose_every_check_skipped_says_so(capsys):
    from transformer_min.verify.base import Check, Context, Result
    from transformer_min.verify.runner import STAGES, run_stages, summary_line
    from transformer_min.verify import registry

    skipping = Check("multihead.x", "multihead", "3.2.2", "a claim", "EXACT", "code",
                     lambda ctx: Result.skip("not applicable here"))
    import io

    out = io.StringIO()
    original = registry.checks_for
    try:
        import transformer_min.verify.runner as runner

        runner.checks_for = lambda stages: [skipping, skipping]
        outcomes = run_stages(Context(), ["multihead"], out)
    finally:
        runner.checks_for = original
    text = out.getvalue()
    assert "every check was skipped" in text and "[PASS]" not in text and text.count("[SKIP]") == 2
    assert all(not o.passed and not o.failed for o in outcomes)
    assert summary_line(outcomes) == "0 passed, 0 failed, 2 skipped (not run)"
    assert "multihead" in STAGES


def test_a_note_has_one_label_not_two(in_tmp, capsys):
    """Issue 38: a logged note under zh starts 提示： (its own label), never 警告：提示：; a log file that starts with
    it is still recognised as tmin's log and may be replaced by the next --log-file."""
    (in_tmp / "c.toml").write_text("[attention]\nd_model = 64\nn_heads = 2\nseq_len = 4\n", encoding="utf-8")
    code, out, err = run(["verify", "attention", "--config", "c.toml", "--lang", "zh", "--log-file", "t.log"], capsys)
    assert code == 0
    notes = [line for line in err.splitlines() if "n_heads" in line]
    assert notes and all(line.startswith("提示：c.toml：") for line in notes), notes
    assert "警告：提示" not in err and (in_tmp / "t.log").read_text(encoding="utf-8").startswith("提示：")
    logging.getLogger().handlers[0].flush()
    code, out, err = run(["verify", "attention", "--config", "c.toml", "--lang", "zh", "--log-file", "t.log"], capsys)
    assert code == 0, err


def test_every_positional_variant_line_is_chinese():
    """Issue 38: `positional: sinusoidal (section 3.5; ...)` was the last English line of `tmin verify --lang zh`;
    each variant's line (and where it comes from) is translated."""
    from transformer_min.core.config import ModelConfig
    from transformer_min.core.i18n import set_language
    from transformer_min.model.variants import POSITIONAL_VARIANTS, describe

    set_language("zh")
    for name in POSITIONAL_VARIANTS:
        line = describe(ModelConfig(positional=name))
        assert line.startswith(f"位置编码：{name}（") and not english_run(line), line
    set_language("en")
    assert describe(ModelConfig()) == "positional: sinusoidal (section 3.5; SinusoidalPositionalEncoding + " \
                                      "MultiHeadAttention)"
