"""`tmin channel check` and `tmin ask` through argparse, against the fake gateway: exact output and exit codes."""

from __future__ import annotations

import argparse
import logging
import re
import sys

import pytest

from transformer_min.cli.channel import add_parsers
from transformer_min.core.errors import TminError

from .conftest import GOOD_KEY, assert_no_key, write_config, write_settings

QUESTION = "Why does eq. (1) divide by sqrt(d_k)?"


def make_parser() -> argparse.ArgumentParser:
    """A parser shaped like tmin's: common options on a parent parser, subcommands from add_parsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config")
    common.add_argument("--settings")
    common.add_argument("--log-level", default="WARNING")
    parser = argparse.ArgumentParser(prog="tmin")
    add_parsers(parser.add_subparsers(dest="command", required=True), [common])
    return parser


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """Parse and dispatch like tmin's main: a TminError becomes `error: <message>` and its exit code."""
    args = make_parser().parse_args(argv)
    try:
        code = args.func(args)
    except TminError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = getattr(exc, "exit_code", 2)
    out, err = capsys.readouterr()
    assert_no_key(out, err)
    return code, out, err


def gateway_settings(tmp_path, gateway, **fields):
    return write_settings(tmp_path, **{"api_base": gateway.url, "api_key": GOOD_KEY, "model": "good", **fields})


def test_check_ok_shows_fields_latency_and_reply(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway)
    code, out, err = run(["channel", "check", "--settings", str(path)], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"channel   {gateway.url}/v1/chat/completions"
    assert lines[3] == f"key       sk-…WXYZ  ({path} api_key)"
    assert lines[4] == f"model     good  ({path} model)"
    assert lines[6].startswith("result    OK: base_url, key and model work; latency ")
    assert lines[7] == "reply     echo: Reply with the single word: pong"
    assert gateway.requests[0]["json"]["max_tokens"] == 32


@pytest.mark.parametrize(
    ("fields", "suspect", "error"),
    [
        ({"api_key": "sk-wrong-000000000000dead"}, "the key", "error: the server rejected the key sk-…dead"),
        ({"model": "missing-model"}, "the model name", "error: the server does not know the model 'missing-model'"),
        ({"model": "garbage"}, "base_url or protocol (the reply is not the protocol's JSON)", "error: the reply from"),
    ],
)
def test_check_failure_names_the_suspect(tmp_path, gateway, capsys, fields, suspect, error):
    path = gateway_settings(tmp_path, gateway, **fields)
    code, out, err = run(["channel", "check", "--settings", str(path)], capsys)
    assert code == 3
    assert out.splitlines()[-1] == f"result    FAIL: check {suspect}"
    assert err.startswith(error) and err.count("\n") == 1  # one readable line
    assert_no_key(out, err, key="sk-wrong-000000000000dead")


def test_check_refused_names_base_url(tmp_path, closed_port, capsys):
    path = write_settings(tmp_path, api_base=f"http://127.0.0.1:{closed_port}", api_key=GOOD_KEY)
    code, out, err = run(["channel", "check", "--settings", str(path)], capsys)
    assert code == 3
    assert "FAIL: check base_url (or the proxy variables)" in out
    assert err.startswith(f"error: connection refused by 127.0.0.1:{closed_port}; fix: check base_url")


def test_check_without_key_says_how_to_configure(capsys):
    code, out, err = run(["channel", "check"], capsys)
    assert (code, out) == (3, "")
    assert err == ("error: no key configured; fix: set TAOTOKEN_API_KEY (or TMIN_API_KEY) in the environment, "
                   "or api_key under [taotoken] in a git-ignored config.local.toml (or in a git-ignored "
                   "settings.json)\n")


def test_check_with_placeholder_key(tmp_path, capsys):
    write_settings(tmp_path, api_key="sk-你的TaoTokenKey")  # ./settings.json is found without --settings
    code, _, err = run(["channel", "check"], capsys)
    assert code == 3
    assert err.startswith("error: no key configured: settings.json api_key is the placeholder")


def test_ask_prints_the_answer(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway)
    code, out, err = run(["ask", QUESTION, "--settings", str(path), "--max-tokens", "42"], capsys)
    assert (code, out, err) == (0, f"echo: {QUESTION}\n", "")
    sent = gateway.requests[0]["json"]
    assert sent["max_tokens"] == 42
    assert sent["messages"][0]["role"] == "system" and "Attention Is All You Need" in sent["messages"][0]["content"]


def test_ask_anthropic_from_config_toml_with_utm_link(tmp_path, gateway, capsys, caplog, monkeypatch):
    write_config(tmp_path, f"""
[model]
d_model = 16
[taotoken]
base_url = "{gateway.url}/v1?utm_source=post"
api_key = "{GOOD_KEY}"
default_model = "good"
protocol = "anthropic"
""")
    monkeypatch.setenv("TMIN_CONFIG", str(tmp_path / "config.toml"))
    with caplog.at_level(logging.WARNING):
        code, out, _ = run(["ask", QUESTION, "--system", ""], capsys)
    assert (code, out) == (0, f"echo: {QUESTION}\n")
    assert gateway.requests[0]["path"] == "/v1/messages"
    assert "system" not in gateway.requests[0]["json"]
    assert "query parameters" in caplog.text


def test_env_overrides_files(tmp_path, gateway, capsys, monkeypatch):
    path = gateway_settings(tmp_path, gateway, model="missing-model")
    monkeypatch.setenv("TMIN_MODEL", "good")
    code, _, _ = run(["ask", "hi", "--settings", str(path)], capsys)
    assert code == 0
    assert gateway.requests[0]["json"]["model"] == "good"


def test_ask_retries_429_then_answers(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway, model="flaky")
    code, out, _ = run(["ask", "hi", "--settings", str(path)], capsys)
    assert (code, out) == (0, "echo: hi\n")
    assert len(gateway.requests) == 3


def test_ask_timeout(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway, model="slow", timeout=0.3)
    code, out, err = run(["ask", "hi", "--settings", str(path)], capsys)
    assert (code, out) == (3, "")
    assert err.startswith(f"error: no reply from 127.0.0.1:{gateway.url.rsplit(':', 1)[1]} within timeout = 0.3 s")


def test_debug_logging_never_shows_the_key(tmp_path, gateway, capsys, caplog):
    path = gateway_settings(tmp_path, gateway)
    caplog.set_level(logging.DEBUG)
    code, _, _ = run(["ask", "hi", "--settings", str(path), "--log-level", "DEBUG"], capsys)
    assert code == 0
    assert "key=sk-…WXYZ" in caplog.text
    assert_no_key(caplog.text)


def test_empty_question_is_an_error(capsys):
    code, _, err = run(["ask", "  "], capsys)
    assert code == 3 and err.startswith("error: QUESTION is empty")


@pytest.mark.parametrize("argv", [["channel"], ["ask", "q", "--max-tokens", "0"], ["channel", "check", "--bogus"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        make_parser().parse_args(argv)
    assert info.value.code == 2


@pytest.fixture
def restore_root_logging():
    """cli.main reconfigures the root logger (basicConfig(force=True)); put it back for the next tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_end_to_end_through_tmin_main(tmp_path, gateway, capsys, restore_root_logging):
    from transformer_min.cli.main import main

    path = gateway_settings(tmp_path, gateway)
    assert main(["channel", "check", "--settings", str(path), "--log-level", "DEBUG"]) == 0
    out, err = capsys.readouterr()
    assert "result    OK: base_url, key and model work" in out
    assert "key=sk-…WXYZ" in err  # --log-level DEBUG adds the details ...
    assert_no_key(out, err)  # ... still without the key

    path.unlink()  # it was ./settings.json too
    assert main(["ask", "hi", "--log-level", "WARNING"]) == 3  # no key: ChannelError's exit code
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: no key configured; fix: set TAOTOKEN_API_KEY") and err.count("\n") == 1


def _floats(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d+|\d+", text)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_verify_llm_sends_what_was_printed_in_the_users_language(tmp_path, gateway, capsys, restore_root_logging,
                                                                 repo_root, lang):
    """`tmin verify attention --llm`: the model gets the (8, 6, 6) demo the screen showed, head 0 as printed,
    and is asked (and told to answer) in the --lang language."""
    from transformer_min.cli.main import main

    path = gateway_settings(tmp_path, gateway)
    assert main(["verify", "attention", "--llm", "--config", str(repo_root / "config.toml"), "--settings", str(path),
                 "--lang", lang, "--log-level", "WARNING"]) == 0
    out = capsys.readouterr().out
    sent = gateway.requests[-1]["json"]["messages"]
    prompt, system = sent[-1]["content"], sent[0]["content"]
    shape = {"en": "Attention weights shape: [8, 6, 6]", "zh": "注意力权重形状：[8, 6, 6]"}[lang]
    assert shape in prompt
    assert ("请用简体中文回答" in system) == (lang == "zh")
    assert "16" not in prompt.split("\n")[2]  # not the multihead stage's [2, 8, 16, 16]
    heading = {"en": "head 0 weights, sentence 0 (6x6", "zh": "第 0 个头的权重矩阵，第 0 句（6x6"}[lang]
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(heading))
    printed = [_floats(line) for line in lines[start + 1:start + 7]]
    prompt_lines = prompt.splitlines()
    at = next(i for i, line in enumerate(prompt_lines) if line.startswith(("Head 0 weights", "第 0 个头的权重矩阵")))
    in_prompt = [_floats(line) for line in prompt_lines[at + 1:at + 7]]
    assert len(printed) == len(in_prompt) == 6
    for a, b in zip(printed, in_prompt):
        assert len(a) == len(b) == 6 and all(abs(x - y) < 1e-4 for x, y in zip(a, b))
    assert ("sent to the model: the [attention] demo's weights, sentence 0, weights (8, 6, 6)" in out) == (lang == "en")


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_channel_models_lists_and_marks_the_configured_one(tmp_path, gateway, capsys, protocol):
    from .conftest import MODELS

    path = gateway_settings(tmp_path, gateway, model="deepseek-chat", protocol=protocol)
    code, out, err = run(["channel", "models", "--settings", str(path)], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"models    {gateway.url}/v1/models  ({protocol}, key sk-…WXYZ)"
    listed = [line[4:].split("  <-")[0] for line in lines[1:-1]]
    assert listed == sorted(MODELS)  # every page of the Anthropic listing, none twice
    assert [line for line in lines if line.startswith("  * ")] == [
        f"  * deepseek-chat  <- configured ({path} model)"]
    assert lines[-1] == f"{len(MODELS)} models"
    gets = [r for r in gateway.requests if r["path"].startswith("/v1/models")]
    if protocol == "anthropic":  # pages of two: ?after_id= follows last_id
        assert [r["path"] for r in gets] == ["/v1/models", "/v1/models?after_id=gpt-4o-mini",
                                             "/v1/models?after_id=deepseek-chat"]
        assert all(r["headers"]["anthropic-version"] == "2023-06-01" for r in gets)
    else:
        assert [r["path"] for r in gets] == ["/v1/models"]
        assert gets[0]["headers"]["Authorization"] == f"Bearer {GOOD_KEY}"


def test_channel_models_when_the_configured_model_is_missing(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway, model="gpt-5-imaginary")
    code, out, err = run(["channel", "models", "--settings", str(path)], capsys)
    assert code == 3
    assert "  * " not in out and "  good" in out  # the list is shown, nothing marked
    assert err.startswith("error: the configured model 'gpt-5-imaginary' (from ")
    assert "fix: set model (settings.json, [taotoken] or TMIN_MODEL) to one of them" in err
    assert err.count("\n") == 1


def test_channel_models_with_a_wrong_key(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway, api_key="sk-wrong-000000000000dead")
    code, out, err = run(["channel", "models", "--settings", str(path)], capsys)
    assert code == 3 and out == ""
    assert err.startswith("error: the server rejected the key sk-…dead")
    assert_no_key(err, key="sk-wrong-000000000000dead")


def test_model_not_found_points_to_channel_models(tmp_path, gateway, capsys):
    path = gateway_settings(tmp_path, gateway, model="missing-model")
    code, out, err = run(["channel", "check", "--settings", str(path)], capsys)
    assert code == 3
    assert "the server does not know the model 'missing-model'" in err
    assert "fix: `tmin channel models` lists the gateway's models" in err


def test_set_reaches_the_channel_over_the_environment(tmp_path, gateway, capsys, restore_root_logging, monkeypatch):
    """--set taotoken.model beats TMIN_MODEL and settings.json (issue 14), and the screen says where it came from."""
    from transformer_min.cli.main import main

    path = gateway_settings(tmp_path, gateway, model="missing-model")
    monkeypatch.setenv("TMIN_MODEL", "also-missing")
    assert main(["channel", "check", "--settings", str(path), "--set", "taotoken.model=good"]) == 0
    out = capsys.readouterr().out
    assert "model     good  (--set taotoken.model=good)" in out
    assert gateway.requests[-1]["json"]["model"] == "good"


@pytest.mark.parametrize("lang,asks", [("zh", "请用简体中文回答。"), ("en", "Answer in English.")])
@pytest.mark.usefixtures("restore_logging")
def test_ask_requests_the_answer_in_the_lang_language(tmp_path, gateway, capsys, lang, asks):
    """Issue 38: `tmin ask --lang zh` asks the model to answer in Chinese (the system prompt says so); --system ""
    still sends no system prompt at all."""
    from transformer_min.cli.main import main

    path = gateway_settings(tmp_path, gateway)
    assert main(["ask", QUESTION, "--settings", str(path), "--lang", lang]) == 0
    system = gateway.requests[-1]["json"]["messages"][0]
    assert system["role"] == "system" and system["content"].endswith(asks)
    assert "Attention Is All You Need" in system["content"]
    assert main(["ask", QUESTION, "--settings", str(path), "--lang", lang, "--system", ""]) == 0
    assert [m["role"] for m in gateway.requests[-1]["json"]["messages"]] == ["user"]
    capsys.readouterr()
