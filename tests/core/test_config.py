"""config.py: typed, validated config.toml + settings.json + environment; errors name the key path."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from transformer_min.core.config import (
    Config,
    ModelConfig,
    RuntimeSettings,
    TrainConfig,
    VocabConfig,
    config_from_dict,
    config_to_dict,
    with_overrides,
)
from transformer_min.channel.schema import SECTIONS, channel_part
from transformer_min.core.errors import ConfigError
from transformer_min.core.project import load_project

pytestmark = pytest.mark.usefixtures("clean_tmin_env")


def load_config(path=None, env=None, sets=()) -> Config:
    """The config part of the one loader, as the commands compose it (with the channel's section)."""
    return load_project(path, env=env, sets=sets, sections=SECTIONS).config


def load_settings(path=None, env=None) -> RuntimeSettings:
    """The runtime part of the one loader (settings.json and the environment)."""
    return load_project(None, path, env=env, quiet=True, sections=SECTIONS).runtime


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
    ('[model]\npositional = "alibi"', "model.positional", "is not one of"),
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
    ({"colour": "blue"}, "unknown key 'colour'"),  # one loader for all keys (issue 13): no "settings." prefix
])
def test_settings_bad_values(tmp_path, data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_settings(write(tmp_path, json.dumps(data), "settings.json"), env={})


def test_settings_bad_env_level_names_the_variable(tmp_path, monkeypatch):
    # issue 13: the message names the variable, not a settings.json that does not exist
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_settings(env={"TMIN_LOG_LEVEL": "NOISY"})
    msg = str(err.value)
    assert "TMIN_LOG_LEVEL" in msg and "'NOISY'" in msg and "settings.json" not in msg and "fix" in msg


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


# ------------------------------------------------------------------------------------------------
# issue 15: the posts' key names, every unknown key at once, misplaced keys, flat JSON
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def notes(caplog):
    """The one-line notes (logged once per process) of this test only."""
    from transformer_min.core import schema

    schema._NOTES_SHOWN.clear()
    caplog.set_level("WARNING", logger="transformer_min.core.config")
    yield caplog
    schema._NOTES_SHOWN.clear()


@pytest.mark.parametrize("text,section,key,value", [
    ("[attention]\nd_model = 64\nn_heads = 4\n", "attention", "num_heads", 4),
    ("[model]\nd_model = 64\nn_heads = 4\n", "model", "num_heads", 4),
    ("[model]\nmax_seq_length = 128\n", "model", "max_len", 128),
    ("[vocab]\nsrc_vocab_size = 1000\ntgt_vocab_size = 1000\n", "vocab", "src_size", 1000),
    ("[vocab]\nsrc_vocab_size = 1000\ntgt_vocab_size = 1000\n", "vocab", "tgt_size", 1000),
])
def test_posts_key_names_are_aliases_with_a_note(tmp_path, notes, text, section, key, value):
    cfg = load_config(write(tmp_path, text))
    assert getattr(getattr(cfg, section), key) == value
    assert f"read as {key}" in notes.text  # the note names the canonical key


def test_alias_and_canonical_together_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"attention\.n_heads: another name for attention\.num_heads.*keep only"):
        load_config(write(tmp_path, "[attention]\nn_heads = 4\nnum_heads = 8\n"))


def test_every_unknown_key_is_reported_at_once(tmp_path):
    text = "[model]\nd_modle = 512\nwarmup_steps = 4000\n[train]\nstpes = 3\n[colour]\nx = 1\n"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    msg = str(err.value)
    assert "4 unknown keys" in msg
    for part in ("model.d_modle", "did you mean 'd_model'", "model.warmup_steps", "train.stpes",
                 "did you mean 'steps'", "colour: unknown section"):
        assert part in msg


@pytest.mark.parametrize("text,bad,home", [
    ("[model]\nwarmup_steps = 4000\n", "model.warmup_steps", "[train]"),
    ("[model]\nlabel_smoothing = 0.1\n", "model.label_smoothing", "[train]"),
    ("[train]\nd_ff = 1024\n", "train.d_ff", "[model]"),
    ("[model]\nbeam_size = 4\n", "model.beam_size", "[decode]"),
    ("d_model = 64\n", "d_model: a key outside any table", "[model] or [attention]"),
])
def test_misplaced_key_points_to_its_section(tmp_path, text, bad, home):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    msg = str(err.value)
    assert bad in msg and f"belongs in {home}" in msg and "did you mean" not in msg


POST_003_HPARAMS = {"d_model": 512, "num_heads": 8, "d_k": 64, "d_v": 64, "d_ff": 2048, "num_layers": 6,
                    "dropout": 0.1, "max_seq_length": 5000, "warmup_steps": 4000, "label_smoothing": 0.1}


def test_flat_json_hyperparameters_map_to_their_sections(tmp_path, notes):
    cfg = load_config(write(tmp_path, json.dumps(POST_003_HPARAMS), "hparams.json"))
    m = cfg.model
    assert (m.d_model, m.num_heads, m.d_k, m.d_v, m.d_ff, m.num_layers, m.dropout, m.max_len) == \
        (512, 8, 64, 64, 2048, 6, 0.1, 5000)
    assert (cfg.train.warmup_steps, cfg.train.label_smoothing) == (4000, 0.1)
    assert "[model] d_model" in notes.text and "[train] warmup_steps, label_smoothing" in notes.text
    assert "read as max_len" in notes.text


def test_json_with_tables_and_unknown_flat_keys(tmp_path):
    cfg = load_config(write(tmp_path, json.dumps({"model": {"d_model": 64, "num_heads": 4}}), "c.json"))
    assert cfg.model.d_model == 64
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, json.dumps({"d_modle": 1, "lr": 2}), "h.json"))
    assert "2 unknown keys" in str(err.value) and "'d_modle'" in str(err.value) and "'lr'" in str(err.value)
    with pytest.raises(ConfigError, match=r"h\.json line 1 column \d+: invalid JSON"):
        load_config(write(tmp_path, '{"d_model": }', "h.json"))


# ------------------------------------------------------------------------------------------------
# [attention] head sizes (issue 15 item 1) and [model] heads
# ------------------------------------------------------------------------------------------------

def test_attention_derives_d_k_from_heads(tmp_path):
    a = load_config(write(tmp_path, "[attention]\nd_model = 64\nn_heads = 4\nseq_len = 8\nbatch_size = 2\n")).attention
    assert (a.d_k, a.d_v, a.head_dim_k, a.head_dim_v) == (None, None, 16, 16)
    for heads, per_head in ((1, 64), (8, 8)):  # the posts' suggested heads experiments
        a = load_config(write(tmp_path, f"[attention]\nd_model = 64\nnum_heads = {heads}\n")).attention
        assert a.head_dim_k == per_head


def test_attention_explicit_head_size_is_accepted_with_a_note(tmp_path, notes):
    a = load_config(write(tmp_path, "[attention]\nd_model = 64\nnum_heads = 4\nd_k = 64\nd_v = 64\n")).attention
    assert (a.head_dim_k, a.head_dim_v) == (64, 64)
    assert "num_heads * d_k = 4 * 64 = 256 != d_model 64" in notes.text and "Table 3" in notes.text


def test_attention_heads_that_do_not_divide(tmp_path):
    with pytest.raises(ConfigError, match=r"attention\.num_heads: 5 does not divide d_model 64"):
        load_config(write(tmp_path, "[attention]\nd_model = 64\nnum_heads = 5\n"))
    a = load_config(write(tmp_path, "[attention]\nd_model = 64\nnum_heads = 5\nd_k = 16\nd_v = 16\n")).attention
    assert a.head_dim_k == 16  # explicit sizes need no divisibility


def test_model_explicit_head_sizes_need_no_divisibility():
    m = ModelConfig(d_model=512, num_heads=7, d_k=64, d_v=64, free_head_dims=True)
    assert (m.head_dim_k, m.head_dim_v) == (64, 64)
    with pytest.raises(ConfigError, match=r"model\.num_heads: 7 does not divide"):
        ModelConfig(d_model=512, num_heads=7, d_k=64, free_head_dims=True)  # d_v absent


@pytest.mark.parametrize("line,field", [
    ("[train]\nlr_factor = nan", "train.lr_factor"),
    ("[train]\ntime_budget_minutes = inf", "train.time_budget_minutes"),
    ("[decode]\nlength_penalty = nan", "decode.length_penalty"),
])
def test_nan_and_inf_are_rejected(tmp_path, line, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.") + ": must be a finite number"):
        load_config(write(tmp_path, line + "\n"))


# ------------------------------------------------------------------------------------------------
# files that are not text or not files (issue 13)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,loader", [("config.toml", load_config), ("settings.json", load_settings)])
def test_file_not_utf8_names_line_and_fix(tmp_path, name, loader):
    path = tmp_path / name
    path.write_bytes(b'[model]\n' if name.endswith("toml") else b'{\n')
    with path.open("ab") as f:
        f.write(b'# caf\xe9\n' if name.endswith("toml") else b'"log_level": "INFO\xff"\n}\n')
    with pytest.raises(ConfigError) as err:
        loader(path, env={})
    msg = str(err.value)
    assert str(path) in msg and "line 2" in msg and "not UTF-8" in msg and "save it as UTF-8" in msg


@pytest.mark.parametrize("name,loader", [("config.toml", load_config), ("settings.json", load_settings)])
def test_folder_given_as_file(tmp_path, name, loader):
    (tmp_path / name).mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        loader(tmp_path / name, env={})


def test_default_settings_json_as_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "settings.json").mkdir()
    with pytest.raises(ConfigError, match="settings.json: is a folder"):
        load_settings(env={})


# ------------------------------------------------------------------------------------------------
# settings.json: one loader for the runtime's and the channel's keys (issue 13)
# ------------------------------------------------------------------------------------------------

def test_settings_unknown_key_suggests_a_channel_key(tmp_path):
    path = write(tmp_path, json.dumps({"api_bse": "https://x.example", "log_level": "INFO"}), "settings.json")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert "unknown key 'api_bse'; did you mean 'api_base'?" in str(err.value)
    assert "known keys: device, log_level, num_threads" not in str(err.value)


def test_settings_every_unknown_key_at_once_and_misplaced(tmp_path):
    path = write(tmp_path, json.dumps({"modle": "x", "d_model": 64, "colour": 1}), "settings.json")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    msg = str(err.value)
    assert "3 unknown keys" in msg and "did you mean 'model'" in msg
    assert "'d_model'" in msg and "belongs in config.toml [model] or [attention]" in msg


def test_settings_base_url_alias_and_the_channel_part(tmp_path, notes):
    path = write(tmp_path, json.dumps({"base_url": "https://x.example/api", "model": "default", "timeout": 30,
                                       "log_level": "DEBUG", "api_key": "sk-a"}), "settings.json")
    s = load_project(None, path, env={}, quiet=True, sections=SECTIONS)
    assert s.runtime.log_level == "DEBUG"
    c = channel_part(s)
    assert (c.base_url.value, c.model.value, c.timeout.value) == ("https://x.example/api", "default", 30.0)
    assert c.base_url.source == f"{path} base_url"  # the key as the file spells it
    assert "'base_url' read as 'api_base'" in notes.text
    both = write(tmp_path, json.dumps({"base_url": "https://a.example", "api_base": "https://b.example"}),
                 "settings.json")
    with pytest.raises(ConfigError, match="keep only 'api_base'"):
        load_settings(both, env={})


def test_settings_channel_values_are_validated_by_the_one_loader(tmp_path):
    path = write(tmp_path, json.dumps({"timeout": "30"}), "settings.json")
    with pytest.raises(ConfigError, match="timeout must be a positive number of seconds"):
        load_settings(path, env={})
