"""config.py: typed, validated config.toml + settings.json + environment; errors name the key path."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from transformer_min.config import (
    Config,
    ModelConfig,
    RuntimeSettings,
    TrainConfig,
    VocabConfig,
    config_from_dict,
    config_to_dict,
    load_config,
    load_settings,
    with_overrides,
)
from transformer_min.errors import ConfigError

pytestmark = pytest.mark.usefixtures("clean_tmin_env")


def write(directory: Path, text: str, name: str = "config.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------
# config.toml
# ------------------------------------------------------------------------------------------------

def test_shipped_config_is_the_paper_base_model(repo_root):
    cfg = load_config(repo_root / "config.toml")
    m = cfg.model
    assert (m.d_model, m.num_heads, m.d_ff, m.num_layers, m.dropout) == (512, 8, 2048, 6, 0.1)
    assert (m.head_dim_k, m.head_dim_v) == (64, 64)  # d_k = d_v = d_model / h
    assert (m.positional, m.norm, m.weight_tying, m.attention_dropout) == ("sinusoidal", "post", "three_way", 0.0)
    assert not m.use_final_norm
    assert cfg.vocab.src_size == cfg.vocab.tgt_size == 37000
    assert (cfg.decode.beam_size, cfg.decode.length_penalty, cfg.decode.max_len_offset) == (4, 0.6, 50)
    assert m == ModelConfig()  # the file restates the built-in defaults
    assert cfg.source == str(repo_root / "config.toml")


@pytest.mark.parametrize("text,path,suggestion", [
    ("[model]\nd_modle = 512\n", "model.d_modle", "did you mean 'd_model'"),
    ("[model]\nnum_head = 8\n", "model.num_head", "did you mean 'num_heads'"),
    ("[modle]\nd_model = 512\n", "modle", "did you mean 'model'"),
])
def test_unknown_key_suggests_nearest(tmp_path, text, path, suggestion):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    msg = str(err.value)
    assert path in msg and suggestion in msg and "unknown" in msg


def test_num_heads_must_divide_d_model(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.num_heads: 7 does not divide d_model 512"):
        load_config(write(tmp_path, "[model]\nnum_heads = 7\n"))


def test_d_k_inconsistent_with_heads(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.d_k: 32 != d_model / num_heads = 64"):
        load_config(write(tmp_path, "[model]\nd_k = 32\n"))
    # Table 3 row B is allowed explicitly
    cfg = load_config(write(tmp_path, "[model]\nd_k = 32\nfree_head_dims = true\n"))
    assert cfg.model.head_dim_k == 32 and cfg.model.head_dim_v == 64


@pytest.mark.parametrize("line,field", [
    ("[model]\ndropout = 1.0", "model.dropout"),
    ("[model]\nattention_dropout = -0.1", "model.attention_dropout"),
    ("[model]\nd_ff = -5", "model.d_ff"),
    ("[model]\nnum_layers = 0", "model.num_layers"),
    ("[vocab]\nsrc_size = -1\ntgt_size = -1", "vocab.src_size"),
    ("[verify]\nseq_len = 0", "verify.seq_len"),
    ("[decode]\nbeam_size = 0", "decode.beam_size"),
])
def test_out_of_range_values_name_the_field(tmp_path, line, field):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, line + "\n"))
    assert field in str(err.value)


@pytest.mark.parametrize("line,field,words", [
    ('[model]\nd_model = "512"', "model.d_model", "expected an integer"),
    ("[model]\nd_model = 512.0", "model.d_model", "expected an integer"),
    ("[model]\nd_model = true", "model.d_model", "expected an integer"),
    ('[model]\ndropout = "0.1"', "model.dropout", "expected a number"),
    ('[model]\npositional = "rope"', "model.positional", "is not one of"),
    ("[model]\nbias = 1", "model.bias", "expected true or false"),
    ("[train]\nbetas = [0.9]", "train.betas", "expected a list of 2"),
    ("model = 3", "model", "expected a table"),
])
def test_wrong_types_name_the_field(tmp_path, line, field, words):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, line + "\n"))
    assert field in str(err.value) and words in str(err.value)


def test_integer_accepted_where_a_float_is_expected(tmp_path):
    cfg = load_config(write(tmp_path, "[model]\ndropout = 0\n"))
    assert cfg.model.dropout == 0.0 and isinstance(cfg.model.dropout, float)


def test_broken_toml_names_file_and_line(tmp_path):
    path = write(tmp_path, "[model]\nd_model = 512\nnum_heads = = 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert str(path) in msg and "line 3" in msg and "TOML" in msg


def test_missing_default_file_gives_paper_defaults(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    cfg = load_config()
    assert cfg == Config()
    assert cfg.model.d_model == 512 and cfg.source == "built-in paper defaults"
    assert "paper defaults" in caplog.text


def test_explicit_missing_file_is_an_error(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found") as err:
        load_config(missing)
    assert str(missing) in str(err.value)
    with pytest.raises(ConfigError, match="not found"):
        load_config(env={"TMIN_CONFIG": str(missing)})


def test_tmin_config_selects_a_file(tmp_path, monkeypatch):
    path = write(tmp_path, "[model]\nd_model = 64\nnum_heads = 4\n", "other.toml")
    monkeypatch.chdir(tmp_path)  # no config.toml here
    monkeypatch.setenv("TMIN_CONFIG", str(path))
    cfg = load_config()
    assert cfg.model.d_model == 64 and cfg.source == str(path)
    assert load_config(env={"TMIN_CONFIG": str(path)}).model.num_heads == 4
    # --config wins over the environment
    other = write(tmp_path, "[model]\nd_model = 128\n", "third.toml")
    assert load_config(other).model.d_model == 128


def test_config_level_cross_field_check():
    with pytest.raises(ConfigError, match="model.weight_tying"):
        Config(vocab=VocabConfig(src_size=100, tgt_size=120))
    assert Config(model=ModelConfig(weight_tying="decoder"), vocab=VocabConfig(src_size=100, tgt_size=120))


# ------------------------------------------------------------------------------------------------
# settings.json and the environment
# ------------------------------------------------------------------------------------------------

def test_settings_log_level_read_and_env_overrides(tmp_path):
    path = write(tmp_path, json.dumps({"log_level": "DEBUG", "api_key": "sk-x", "timeout": 30}), "settings.json")
    assert load_settings(path, env={}).log_level == "DEBUG"  # channel keys are ignored here
    assert load_settings(path, env={"TMIN_LOG_LEVEL": "WARNING"}).log_level == "WARNING"


def test_settings_default_file_optional(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}) == RuntimeSettings()
    write(tmp_path, json.dumps({"log_level": "ERROR"}), "settings.json")
    assert load_settings(env={}).log_level == "ERROR"  # ./settings.json is read by default
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.json", env={})


def test_settings_bad_json_names_the_line(tmp_path):
    path = write(tmp_path, '{\n  "log_level": "INFO",\n  "device": cpu\n}\n', "settings.json")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert str(path) in str(err.value) and "line 3" in str(err.value)


@pytest.mark.parametrize("data,field", [
    ({"log_level": "LOUD"}, "settings.log_level"),
    ({"device": "tpu"}, "settings.device"),
    ({"colour": "blue"}, "settings.colour"),
])
def test_settings_bad_values(tmp_path, data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_settings(write(tmp_path, json.dumps(data), "settings.json"), env={})


def test_settings_bad_env_level(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"settings\.log_level"):
        load_settings(env={"TMIN_LOG_LEVEL": "NOISY"})


# ------------------------------------------------------------------------------------------------
# dict round trip and overrides
# ------------------------------------------------------------------------------------------------

def test_dict_round_trip():
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, d_k=16, free_head_dims=True),
                 vocab=VocabConfig(src_size=99, tgt_size=99), train=TrainConfig(betas=(0.8, 0.9), steps=7))
    data = config_to_dict(cfg)
    assert data["train"]["betas"] == [0.8, 0.9]  # TOML/JSON friendly
    json.dumps(data)  # a checkpoint can embed it
    back = config_from_dict(data, source="checkpoint")
    assert back == dataclasses.replace(cfg, source="checkpoint")
    assert config_from_dict(config_to_dict(Config())) == dataclasses.replace(Config(), source="dict")


def test_config_from_dict_validates():
    with pytest.raises(ConfigError, match=r"model\.num_heads"):
        config_from_dict({"model": {"num_heads": 7}})


def test_with_overrides_validates_and_applies():
    cfg = Config()
    assert with_overrides(cfg, "model", d_model=None) is cfg  # None means "not given"
    small = with_overrides(cfg, "model", d_model=64, num_heads=4)
    assert (small.model.d_model, small.model.num_heads, small.model.d_ff) == (64, 4, 2048)
    assert cfg.model.d_model == 512  # frozen: the original is unchanged
    with pytest.raises(ConfigError, match=r"model\.num_heads"):
        with_overrides(cfg, "model", num_heads=7)
    with pytest.raises(ConfigError, match=r"train\.steps: expected an integer"):
        with_overrides(cfg, "train", steps="many")
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        with_overrides(cfg, "train", step=5)
