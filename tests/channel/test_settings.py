"""Channel settings: precedence, aliases, validation, placeholder and git-tracked keys, redaction."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from transformer_min.channel import settings as settings_mod
from transformer_min.channel.settings import (
    ChannelConfigError,
    ChannelSettings,
    MissingKeyError,
    load_channel,
    redact,
    resolve_paths,
    scrub,
)
from transformer_min.core.errors import ChannelError, ConfigError
from transformer_min.core.keys import RUNTIME_KEYS

from .conftest import GOOD_KEY, assert_no_key, write_config, write_settings

TOML_KEY = "sk-toml-aaaaaaaaaaaa1111"
JSON_KEY = "sk-json-bbbbbbbbbbbb2222"
ENV_KEY = "sk-envv-cccccccccccc3333"


def test_defaults_with_env_key_only():
    s = load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY})
    assert (s.base_url, s.protocol, s.model, s.timeout) == ("https://taotoken.net/api", "openai", "gpt-4o-mini", 30.0)
    assert s.api_key == GOOD_KEY
    assert s.sources["api_key"] == "env TAOTOKEN_API_KEY"
    assert s.sources["base_url"] == "default"


def test_anthropic_protocol_has_its_own_default_model():
    s = load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY, "TMIN_PROTOCOL": "Anthropic"})
    assert s.protocol == "anthropic"
    assert s.model.startswith("claude")


def test_precedence_env_over_settings_over_toml(tmp_path):
    config = write_config(tmp_path, f"""
[model]
d_model = 512
[taotoken]
base_url = "https://toml.example/api"
api_key = "{TOML_KEY}"
model = "toml-model"
timeout = 11
protocol = "anthropic"
""")
    settings = write_settings(tmp_path, api_base="https://json.example/api", api_key=JSON_KEY, model="json-model")
    only_files = load_channel(config, settings, {})
    assert only_files.base_url == "https://json.example/api"
    assert only_files.api_key == JSON_KEY
    assert only_files.model == "json-model"
    assert only_files.timeout == 11.0  # only config.toml sets it
    assert only_files.protocol == "anthropic"

    env = {"TAOTOKEN_API_KEY": ENV_KEY, "TMIN_BASE_URL": "https://env.example/api", "TMIN_MODEL": "env-model",
           "TMIN_PROTOCOL": "openai"}
    s = load_channel(config, settings, env)
    assert (s.api_key, s.base_url, s.model, s.protocol) == (ENV_KEY, "https://env.example/api", "env-model", "openai")
    assert s.sources["model"] == "env TMIN_MODEL"
    assert s.sources["timeout"].endswith("[taotoken] timeout")


def test_tmin_api_key_beats_taotoken_api_key():
    s = load_channel(None, None, {"TAOTOKEN_API_KEY": ENV_KEY, "TMIN_API_KEY": GOOD_KEY})
    assert s.api_key == GOOD_KEY


def test_empty_env_variable_counts_as_unset(tmp_path):
    settings = write_settings(tmp_path, api_key=JSON_KEY)
    assert load_channel(None, settings, {"TAOTOKEN_API_KEY": ""}).api_key == JSON_KEY


def test_default_model_alias(tmp_path):
    config = write_config(tmp_path, f'[taotoken]\napi_key = "{TOML_KEY}"\ndefault_model = "deepseek-chat"\n')
    assert load_channel(config, None, {}).model == "deepseek-chat"


def test_model_and_default_model_disagreeing_is_an_error(tmp_path):
    config = write_config(tmp_path, f'[taotoken]\napi_key = "{TOML_KEY}"\nmodel = "a"\ndefault_model = "b"\n')
    with pytest.raises(ChannelConfigError, match="taotoken.default_model: another name for taotoken.model.*keep only"):
        load_channel(config, None, {})


def test_runtime_keys_in_settings_json_are_ignored(tmp_path):
    settings = write_settings(tmp_path, api_key=JSON_KEY, log_level="DEBUG", num_threads=2, language="zh")
    assert load_channel(None, settings, {}).api_key == JSON_KEY
    assert set(RUNTIME_KEYS) == {"log_level", "num_threads", "language"}  # the device is config.toml [train] device


@pytest.mark.parametrize(
    ("writer", "content", "suggestion"),
    [
        ("toml", '[taotoken]\nbase_ulr = "https://x.example"\n', "base_url"),
        ("toml", '[taotoken]\napi_base = "https://x.example"\n', "base_url"),
        ("json", {"api_bse": "https://x.example"}, "api_base"),
        ("json", {"modle": "x"}, "model"),
    ],
)
def test_unknown_key_names_field_and_suggests_nearest(tmp_path, writer, content, suggestion):
    if writer == "toml":
        config, settings = write_config(tmp_path, content), None
    else:
        config, settings = None, write_settings(tmp_path, **content)
    with pytest.raises(ChannelConfigError) as info:
        load_channel(config, settings, {"TAOTOKEN_API_KEY": GOOD_KEY})
    bad = next(iter(content)) if isinstance(content, dict) else content.split("\n")[1].split(" ")[0]
    # settings.json is flat; config.toml names the key with its section
    assert (f"unknown key '{bad}'" if writer == "json" else f"taotoken.{bad}: unknown key") in str(info.value)
    assert f"did you mean '{suggestion}'?" in str(info.value)


def test_unknown_key_far_from_everything_lists_allowed(tmp_path):
    settings = write_settings(tmp_path, zzz=1)
    with pytest.raises(ChannelConfigError, match="allowed keys: api_base, api_key"):
        load_channel(None, settings, {})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        ({"timeout": "30"}, "timeout must be a positive number of seconds, got '30'"),
        ({"timeout": True}, "timeout must be a positive number"),
        ({"protocol": "grpc"}, "protocol 'grpc' is not one of openai, anthropic"),
        ({"api_base": "taotoken.net/api"}, "is not an http(s) URL"),
        ({"model": ""}, "model is empty"),
        ({"model": 4}, "model must be a string"),
    ],
)
def test_wrong_types_name_field_and_fix(tmp_path, fields, message):
    settings = write_settings(tmp_path, **fields)
    with pytest.raises(ChannelConfigError) as info:
        load_channel(None, settings, {"TAOTOKEN_API_KEY": GOOD_KEY})
    assert message in str(info.value)
    assert "settings.json" in str(info.value)
    assert "fix" in str(info.value)


def test_wrong_protocol_from_env():
    with pytest.raises(ChannelConfigError, match="env TMIN_PROTOCOL: protocol 'soap'"):
        load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY, "TMIN_PROTOCOL": "soap"})


def test_non_string_key_is_not_echoed(tmp_path):
    settings = write_settings(tmp_path, api_key=1234567890123)
    with pytest.raises(ChannelConfigError) as info:
        load_channel(None, settings, {})
    assert "1234567890123" not in str(info.value)


def test_malformed_settings_json_names_file_and_line(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{\n  "api_key": "x",\n  "model" "oops"\n}\n', encoding="utf-8")
    with pytest.raises(ChannelConfigError, match=r"settings.json line 3 column"):
        load_channel(None, path, {})


def test_malformed_toml_names_file_and_line(tmp_path):
    config = write_config(tmp_path, "[taotoken]\nmodel = \n")
    with pytest.raises(ChannelConfigError, match=r"config.toml: invalid TOML: .*line 2"):
        load_channel(config, None, {})


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ChannelConfigError, match="file not found"):
        load_channel(tmp_path / "nope.toml", None, {"TAOTOKEN_API_KEY": GOOD_KEY})


def test_channel_config_error_is_both_channel_and_config_error():
    err = ChannelConfigError("x")
    assert isinstance(err, ChannelError) and isinstance(err, ConfigError)
    assert err.exit_code == 3


def test_base_url_with_utm_is_cleaned_with_warning(caplog):
    url = "https://taotoken.net/api/?utm_source=blog&utm_medium=post#top"
    with caplog.at_level(logging.WARNING):
        s = load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY, "TMIN_BASE_URL": url})
    assert s.base_url == "https://taotoken.net/api"
    assert "query parameters" in caplog.text and "env TMIN_BASE_URL" in caplog.text


def test_clean_base_url_without_query_does_not_warn(caplog):
    with caplog.at_level(logging.WARNING):
        s = load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY, "TMIN_BASE_URL": "https://taotoken.net/api/"})
    assert s.base_url == "https://taotoken.net/api"
    assert caplog.text == ""


def test_no_key_anywhere():
    with pytest.raises(MissingKeyError, match="^no key configured; fix: set TAOTOKEN_API_KEY"):
        load_channel(None, None, {})


@pytest.mark.parametrize(
    "placeholder", ["sk-你的TaoTokenKey", "sk-你的实际key", "YOUR_TAOTOKEN_API_KEY", "<your key>", "sk-xxxxxxxx"]
)
def test_placeholder_keys_are_no_key(tmp_path, placeholder):
    settings = write_settings(tmp_path, api_key=placeholder)
    with pytest.raises(MissingKeyError) as info:
        load_channel(None, settings, {})
    message = str(info.value)
    assert message.startswith(f"no key configured: {settings} api_key is the placeholder")
    assert "placeholder" in message and "TAOTOKEN_API_KEY" in message


@pytest.mark.parametrize("empty", ["", "   ", "\n"])
def test_empty_keys_are_no_key(tmp_path, empty):
    config = write_config(tmp_path, f'[taotoken]\napi_key = "{empty.encode("unicode_escape").decode()}"\n')
    with pytest.raises(MissingKeyError, match="is empty"):
        load_channel(config, None, {})


def test_placeholder_in_env_is_no_key():
    with pytest.raises(MissingKeyError, match="env TAOTOKEN_API_KEY is the placeholder"):
        load_channel(None, None, {"TAOTOKEN_API_KEY": "YOUR_TAOTOKEN_API_KEY"})


def test_whitespace_around_key_is_stripped_with_warning(tmp_path, caplog):
    settings = write_settings(tmp_path, api_key=f"  {GOOD_KEY}\n")
    with caplog.at_level(logging.WARNING):
        s = load_channel(None, settings, {})
    assert s.api_key == GOOD_KEY
    assert "spaces or a newline" in caplog.text
    assert_no_key(caplog.text, repr(s))


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("kind", ["json", "toml"])
def test_key_in_git_tracked_file_is_refused(tmp_path, kind):
    _git("init", "-q", cwd=tmp_path)
    if kind == "json":
        path = settings = write_settings(tmp_path, api_key=GOOD_KEY)
        config = None
    else:
        path = config = write_config(tmp_path, f'[taotoken]\napi_key = "{GOOD_KEY}"\n')
        settings = None
    assert load_channel(config, settings, {}).api_key == GOOD_KEY  # untracked: fine
    _git("add", path.name, cwd=tmp_path)
    with pytest.raises(MissingKeyError) as info:
        load_channel(config, settings, {})
    assert "git tracks" in str(info.value) and path.name in str(info.value)
    assert_no_key(str(info.value))
    # The same key from the environment is fine: only the file is the problem.
    assert load_channel(config, settings, {"TAOTOKEN_API_KEY": GOOD_KEY}).api_key == GOOD_KEY


def test_git_check_is_skipped_without_git(tmp_path, monkeypatch):
    settings = write_settings(tmp_path, api_key=GOOD_KEY)
    monkeypatch.setattr(settings_mod.shutil, "which", lambda name: None)
    assert load_channel(None, settings, {}).api_key == GOOD_KEY


def test_resolve_paths(tmp_path, monkeypatch):
    assert resolve_paths(None, None, {}) == (None, None)  # cwd is an empty tmp_path
    write_config(tmp_path, "")
    write_settings(tmp_path)
    assert resolve_paths(None, None, {}) == (Path("config.toml"), Path("settings.json"))
    assert resolve_paths(None, None, {"TMIN_CONFIG": "other.toml"})[0] == Path("other.toml")
    assert resolve_paths("a.toml", "b.json", {"TMIN_CONFIG": "other.toml"}) == (Path("a.toml"), Path("b.json"))


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        (GOOD_KEY, "sk-…WXYZ"),
        ("short-key", "****"),
        ("", "(none)"),
        (None, "(none)"),
        (f" {GOOD_KEY}\n", "sk-…WXYZ"),
    ],
)
def test_redact(key, shown):
    assert redact(key) == shown


def test_scrub_and_repr_never_show_the_key():
    text = scrub(f"Authorization: Bearer {GOOD_KEY}", GOOD_KEY)
    assert text == "Authorization: Bearer sk-…WXYZ"
    s = ChannelSettings(api_key=GOOD_KEY)
    assert_no_key(repr(s), str(s))
    assert s.key_hint == "sk-…WXYZ"


def test_base_url_in_settings_json_is_read_as_api_base(tmp_path):
    # issue 15: the posts write base_url in settings.json; read it as api_base (with a note)
    settings = write_settings(tmp_path, base_url="https://json.example/api", api_key=JSON_KEY)
    s = load_channel(None, settings, {})
    assert s.base_url == "https://json.example/api"
    assert s.sources["base_url"].endswith("settings.json base_url")


def test_config_local_toml_holds_the_key(tmp_path):
    config = write_config(tmp_path, '[model]\nd_model = 512\n[taotoken]\nmodel = "toml-model"\napi_key = ""\n')
    (tmp_path / "config.local.toml").write_text(f'[taotoken]\napi_key = "{TOML_KEY}"\n', encoding="utf-8")
    s = load_channel(config, None, {})
    assert (s.api_key, s.model) == (TOML_KEY, "toml-model")  # the local file wins over config.toml
    assert s.sources["api_key"] == f"{tmp_path / 'config.local.toml'} [taotoken] api_key"
    assert load_channel(None, write_settings(tmp_path, api_key=JSON_KEY), {}).api_key == JSON_KEY  # json wins
    (tmp_path / "settings.json").unlink()  # ./settings.json is read when no path is given
    (tmp_path / "other.toml").write_text("", encoding="utf-8")
    (tmp_path / "other.local.toml").write_text(f'[taotoken]\napi_key = "{ENV_KEY}"\n', encoding="utf-8")
    assert load_channel(tmp_path / "other.toml", None, {}).api_key == ENV_KEY  # x.toml -> x.local.toml


def test_config_local_toml_holds_only_taotoken(tmp_path):
    (tmp_path / "config.local.toml").write_text("[model]\nd_model = 64\n", encoding="utf-8")
    with pytest.raises(ChannelConfigError, match=r"config.local.toml: a local file holds only \[taotoken\]"):
        load_channel(None, None, {"TAOTOKEN_API_KEY": GOOD_KEY})


@pytest.mark.parametrize("name", ["config.toml", "settings.json"])
def test_files_that_are_not_utf8_or_are_folders(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"\xff\xfe[taotoken]\n")
    args = (path, None) if name == "config.toml" else (None, path)
    with pytest.raises(ChannelConfigError, match=r"line 1, column 1: the \w+ file is not UTF-8"):
        load_channel(*args, {"TAOTOKEN_API_KEY": GOOD_KEY})
    path.unlink()
    path.mkdir()
    with pytest.raises(ChannelConfigError, match="is a folder"):
        load_channel(*args, {"TAOTOKEN_API_KEY": GOOD_KEY})
