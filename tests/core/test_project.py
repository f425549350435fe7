"""The one loader (issue 14): config.toml, settings.json, the environment and --set read once into a Project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import functools

from transformer_min.channel.schema import SECTIONS, channel_part
from transformer_min.core import project as core_project
from transformer_min.core.config import Config, TrainConfig
from transformer_min.core.config_parse import parse_set
from transformer_min.core.errors import ConfigError
from transformer_min.core.project import with_sets

# The loader as every command composes it: core's sections and the channel's (channel.schema.SECTIONS).
load_project = functools.partial(core_project.load_project, sections=SECTIONS)

pytestmark = pytest.mark.usefixtures("clean_tmin_env")


def write(directory: Path, text: str, name: str = "config.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def here(tmp_path, monkeypatch):
    """An empty working folder: no ./config.toml, no ./settings.json."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------------------------------------
# --set: the value is a TOML value, a bare word a string
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("item,expected", [
    ("attention.num_heads=4", ("attention", "num_heads", 4)),
    ("model.positional=rope", ("model", "positional", "rope")),  # bare word -> string
    ("train.lr_factor=0.5", ("train", "lr_factor", 0.5)),
    ('model.norm="pre"', ("model", "norm", "pre")),  # a quoted TOML string
    ("model.bias=false", ("model", "bias", False)),
    ("train.betas=[0.8, 0.9]", ("train", "betas", [0.8, 0.9])),
    (" decode.beam_size = 8 ", ("decode", "beam_size", 8)),
    ("taotoken.base_url=https://x.example/api", ("taotoken", "base_url", "https://x.example/api")),
])
def test_parse_set_reads_toml_values(item, expected):
    assert parse_set(item) == expected


@pytest.mark.parametrize("item,words", [
    ("attention.num_heads", "expected SECTION.KEY=VALUE"),  # no '='
    ("num_heads=4", "expected SECTION.KEY=VALUE"),  # no section
    ("model.num_heads=", "no value after '='"),
    ("model.a.b=1", "expected SECTION.KEY=VALUE"),
])
def test_parse_set_malformed(item, words):
    with pytest.raises(ConfigError) as err:
        parse_set(item)
    assert repr(item) in str(err.value) and words in str(err.value) and "--set attention.num_heads=4" in str(err.value)


def test_set_over_the_file(here):
    path = write(here, "[attention]\nd_model = 64\nnum_heads = 8\n")
    p = load_project(path, env={}, sets=["attention.num_heads=4", "model.positional=rope", "train.lr_factor=0.5"])
    a = p.config.attention
    assert (a.d_model, a.num_heads, a.head_dim_k) == (64, 4, 16)  # 64 / 4, section 3.2.2
    assert (p.config.model.positional, p.config.train.lr_factor) == ("rope", 0.5)
    assert p.config.source == str(path)
    assert load_project(path, env={}).config.attention.num_heads == 8  # the file alone


def test_later_set_wins_and_aliases_work(here):
    p = load_project(None, env={}, sets=["attention.num_heads=2", "attention.num_heads=16"], quiet=True)
    assert p.config.attention.num_heads == 16
    assert load_project(None, env={}, sets=["attention.n_heads=4"], quiet=True).config.attention.num_heads == 4


@pytest.mark.parametrize("item,words", [
    ("model.num_head=4", ["model.num_head: unknown key", "--set model.num_head=4", "did you mean 'num_heads'"]),
    ("modle.d_model=64", ["modle: unknown section", "did you mean 'model'"]),
    ("model.warmup_steps=10", ["model.warmup_steps", "belongs in [train]"]),
    ("model.d_model=big", ["--set model.d_model=big", "model.d_model: expected an integer, got 'big'"]),
    ("model.dropout=1.5", ["--set model.dropout=1.5", "model.dropout: must lie in [0, 1)"]),
    ("attention.num_heads=5", ["--set attention.num_heads=5", "5 does not divide d_model 512"]),
    ("settings.log_lvl=DEBUG", ["settings.log_lvl: unknown key", "did you mean 'log_level'"]),
    ("settings.log_level=LOUD", ["--set settings.log_level=LOUD", "'LOUD' is not one of"]),
    ("taotoken.timeout=0", ["--set taotoken.timeout=0", "timeout must be a positive number"]),
    ("settings.api_key=sk-x", ["settings.api_key: unknown key", "--set taotoken.api_key="]),
    ("settings.device=cpu", ["settings.device: unknown key", "belongs in [train]"]),
])
def test_set_is_validated_like_the_file(here, item, words):
    with pytest.raises(ConfigError) as err:
        load_project(None, env={}, sets=[item], quiet=True)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_every_misspelling_gets_the_nearest_key_with_its_section(here):
    cases = [(write(here, "[model]\nnum_head = 4\n", "m.toml"), None, "did you mean 'num_heads'? (model.num_heads)"),
             (None, write(here, json.dumps({"log_levle": "DEBUG"}), "s.json"), "did you mean 'log_level'?"),
             (write(here, '[taotoken]\nmodle = "x"\n', "t.toml"), None, "did you mean 'model'? (taotoken.model)")]
    for config, settings, words in cases:
        with pytest.raises(ConfigError) as err:
            load_project(config, settings, env={}, quiet=True)
        assert words in str(err.value), str(err.value)


def test_file_errors_still_name_the_file(here):
    path = write(here, "[model]\nnum_heads = 7\n")
    with pytest.raises(ConfigError, match=r"config.toml: model\.num_heads: 7 does not divide"):
        load_project(path, env={}, sets=["train.steps=3"])
    assert load_project(path, env={}, sets=["model.num_heads=8"]).config.model.num_heads == 8  # --set mends it


# ------------------------------------------------------------------------------------------------
# precedence: file < environment < --set
# ------------------------------------------------------------------------------------------------

def test_runtime_precedence(here):
    settings = write(here, json.dumps({"log_level": "DEBUG", "language": "zh"}), "settings.json")
    assert load_project(None, settings, env={}, quiet=True).runtime.log_level == "DEBUG"
    env = {"TMIN_LOG_LEVEL": "WARNING"}
    assert load_project(None, settings, env=env, quiet=True).runtime.log_level == "WARNING"
    p = load_project(None, settings, env=env, sets=["settings.log_level=ERROR"], quiet=True)
    assert (p.runtime.log_level, p.runtime.language) == ("ERROR", "zh")


def test_channel_precedence_and_sources(here):
    config = write(here, '[taotoken]\nmodel = "toml-model"\ntimeout = 11\nprotocol = "anthropic"\n')
    settings = write(here, json.dumps({"model": "json-model"}), "settings.json")
    assert not hasattr(load_project(config, env={}).config, "taotoken")  # the channel's own, not core's Config
    layers = [({}, (), "json-model", f"{settings} model"),
              ({"TMIN_MODEL": "env-model"}, (), "env-model", "env TMIN_MODEL"),
              ({"TMIN_MODEL": "env-model"}, ("taotoken.model=set-model",), "set-model", "--set taotoken.model=set-model")]
    for env, sets, model, source in layers:
        c = channel_part(load_project(config, settings, env=env, sets=sets))
        assert (c.model.value, c.model.source) == (model, source)
        assert (c.timeout.value, c.timeout.source) == (11.0, f"{config} [taotoken] timeout")
        assert c.protocol.value == "anthropic" and c.api_key is None


def test_core_alone_knows_no_channel_section(here):
    """Without the channel's section handed over, [taotoken] and the channel's settings.json keys are unknown."""
    config = write(here, '[taotoken]\nmodel = "m"\n', "t.toml")
    with pytest.raises(ConfigError, match="taotoken: unknown section"):
        core_project.load_project(config, env={})
    settings = write(here, json.dumps({"api_key": "sk-x"}), "settings.json")
    with pytest.raises(ConfigError, match="unknown key 'api_key'"):
        core_project.load_project(None, settings, env={}, quiet=True)
    settings.unlink()
    with pytest.raises(KeyError, match="taotoken"):
        core_project.load_project(None, env={}, quiet=True).section("taotoken")


def test_taotoken_values_are_checked_in_the_file(here):
    path = write(here, '[taotoken]\ntimeout = "30"\n')
    with pytest.raises(ConfigError, match=r"config.toml: taotoken\.timeout: timeout must be a positive number.*'30'"):
        load_project(path, env={})
    path = write(here, '[taotoken]\ntimeout = 0\n')
    with pytest.raises(ConfigError, match=r"config.toml: taotoken\.timeout: timeout must be a positive number"):
        load_project(path, env={})
    with pytest.raises(ConfigError, match=r"taotoken\.api_base: unknown key; did you mean 'base_url'"):
        load_project(write(here, '[taotoken]\napi_base = "https://x.example"\n'), env={})


# ------------------------------------------------------------------------------------------------
# num_threads: one home; the device: config.toml [train]
# ------------------------------------------------------------------------------------------------

def test_num_threads_one_home(here, caplog):
    assert "num_threads" not in TrainConfig.__dataclass_fields__
    path = write(here, "[train]\nnum_threads = 3\n")
    p = load_project(path, env={})
    assert (p.runtime.num_threads, p.origin("num_threads")) == (3, "train.num_threads")
    assert "read as settings.json num_threads" in caplog.text
    settings = write(here, json.dumps({"num_threads": 3}), "settings.json")
    assert load_project(path, settings, env={}).runtime.num_threads == 3  # the same value twice: fine
    write(here, json.dumps({"num_threads": 2}), "settings.json")
    with pytest.raises(ConfigError, match="num_threads is set twice.*keep it in settings.json only"):
        load_project(path, settings, env={})
    p = load_project(None, settings, env={}, sets=["train.num_threads=1"], quiet=True)
    assert (p.runtime.num_threads, p.origin("num_threads")) == (1, "--set train.num_threads")


def test_settings_device_names_its_replacement(here):
    settings = write(here, json.dumps({"device": "cuda"}), "settings.json")
    with pytest.raises(ConfigError) as err:
        load_project(None, settings, env={}, quiet=True)
    assert "settings.device = 'cuda'" in str(err.value) and "[train] device" in str(err.value)
    settings.unlink()
    p = load_project(None, None, env={}, sets=["train.device=cpu"], quiet=True)
    assert p.config.train.device == "cpu"


def test_misspelled_environment_variable_gets_the_nearest(here, caplog):
    from transformer_min.core import schema

    schema._NOTES_SHOWN.clear()
    load_project(None, env={"TMIN_MODLE": "x", "TMIN_CACHE_DIR": "/tmp"}, quiet=True)
    assert "TMIN_MODLE is not one tmin reads" in caplog.text and "did you mean TMIN_MODEL?" in caplog.text
    assert "TMIN_CACHE_DIR" not in caplog.text


# ------------------------------------------------------------------------------------------------
# commands that take their config from a checkpoint
# ------------------------------------------------------------------------------------------------

def test_with_sets_on_a_checkpoint_config(here):
    saved = Config(source="checkpoint x")
    p = load_project(None, env={}, sets=["decode.beam_size=8"], quiet=True)
    cfg = with_sets(saved, p, ("decode",), "tmin decode")
    assert (cfg.decode.beam_size, cfg.decode.length_penalty, cfg.source) == (8, 0.6, "checkpoint x")
    p = load_project(None, env={}, sets=["model.dropout=0.2"], quiet=True)
    with pytest.raises(ConfigError, match=r"--set model\.\*: tmin decode reads \[model\] from its checkpoint"):
        with_sets(saved, p, ("decode",), "tmin decode")
