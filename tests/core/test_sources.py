"""Every config refusal names the key and the source its value came from (issue 38, item 7).

The loader's own refusals (a bad value in config.toml, a flat JSON file, a file TMIN_CONFIG names, --set,
settings.json, config.local.toml, the environment) and the refusals made after loading, from the typed config
(the memory checks, verify.seq_len > model.max_len), are looped over keys x sources: each message must name
the key and the right source, and never the config file for a value that came from --set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_min.channel.schema import SECTIONS as CHANNEL
from transformer_min.core.config import config_from_dict, origin_of, with_overrides
from transformer_min.core.errors import ConfigError
from transformer_min.core.project import load_project, with_sets
from transformer_min.model.memory import check_batch_memory, check_model_memory, check_verify_lengths

pytestmark = pytest.mark.usefixtures("clean_tmin_env")


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """In an empty folder: no ./config.toml or ./settings.json of the repository is read."""
    monkeypatch.chdir(tmp_path)

# config.toml key -> a value (TOML text) its section refuses
BAD_CONFIG = {
    "model.d_model": "0", "model.num_heads": "7", "model.d_k": "0", "model.d_ff": "-1", "model.num_layers": "0",
    "model.dropout": "1.5", "model.attention_dropout": "-0.1", "model.max_len": "0", "model.positional": '"abs"',
    "model.relative_clip": "0", "model.norm": '"mid"', "model.weight_tying": '"all"', "model.layer_norm_eps": "0.0",
    "model.bias": '"yes"', "model.final_norm": "3", "vocab.src_size": "100", "vocab.pad_id": "-1",
    "verify.seq_len": "0", "verify.batch_size": "0", "verify.seed": '"x"', "attention.num_heads": "7",
    "attention.seq_len": "0", "attention.d_k": "-2", "train.steps": "0", "train.lr_factor": "0.0",
    "train.betas": "[0.9]", "train.seed": "-1", "train.accum_steps": "5000", "train.out_dir": '""',
    "train.device": '"tpu"', "train.precision": '"fp8"', "train.label_smoothing": "1.0", "train.clip": "-1.0",
    "data.vocab_size": "3", "data.tgt_lang": '"de"', "data.track": '"x"', "data.max_len": "0",
    "decode.beam_size": "0", "decode.length_penalty": "-1.0", "decode.search": '"x"',
    "decode.max_len_offset": "-1",
}
BAD_RUNTIME = {"log_level": '"LOUD"', "num_threads": "-1", "language": '"fr"'}
BAD_CHANNEL = {"base_url": '"ftp://x"', "timeout": "-1", "protocol": '"soap"', "model": '""'}


def refusal(**kwargs) -> str:
    with pytest.raises(ConfigError) as e:
        load_project(quiet=True, **{"env": {}, **kwargs})
    return str(e.value)


def assert_names(message: str, key: str, source: str, not_source: str | None = None) -> None:
    assert key in message and source in message, f"{key} from {source}: {message}"
    if not_source:
        assert not_source not in message, f"{key} from {source} blamed on {not_source}: {message}"


@pytest.mark.parametrize("key", BAD_CONFIG)
def test_a_config_value_is_refused_naming_the_key_and_its_source(key, tmp_path):
    section, name = key.split(".")
    value = BAD_CONFIG[key]
    (tmp_path / "config.toml").write_text("[train]\nsteps = 3\n")  # a config file that is not the source
    item = f"{key}={value}"
    assert_names(refusal(sets=[item]), key, f"--set {item}", not_source="config.toml:")
    bad = tmp_path / "c.toml"
    bad.write_text(f"[{section}]\n{name} = {value}\n")
    assert_names(refusal(config=str(bad)), key, str(bad))
    assert_names(refusal(env={"TMIN_CONFIG": str(bad)}), key, str(bad))
    flat = tmp_path / "hp.json"
    flat.write_text(json.dumps({section: {name: json.loads(value.replace("'", '"'))}}))
    assert_names(refusal(config=str(flat)), key, str(flat))


@pytest.mark.parametrize("key", BAD_RUNTIME)
def test_a_settings_value_is_refused_naming_the_key_and_its_source(key, tmp_path):
    item = f"settings.{key}={BAD_RUNTIME[key]}"
    assert_names(refusal(sets=[item]), key, f"--set {item}")
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({key: json.loads(BAD_RUNTIME[key])}))
    assert_names(refusal(settings=str(settings)), key, str(settings))


def test_the_runtime_values_of_config_toml_and_the_environment_name_their_source(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[train]\nnum_threads = -1\n")
    assert_names(refusal(config=str(config)), "num_threads", str(config))
    assert_names(refusal(env={"TMIN_LOG_LEVEL": "LOUD"}), "LOUD", "TMIN_LOG_LEVEL")


@pytest.mark.parametrize("key", BAD_CHANNEL)
def test_a_channel_value_is_refused_naming_the_key_and_its_source(key, tmp_path):
    value = BAD_CHANNEL[key]
    item = f"taotoken.{key}={value}"
    assert_names(refusal(sets=[item], sections=CHANNEL), key, f"--set {item}")
    config = tmp_path / "c.toml"
    config.write_text(f"[taotoken]\n{key} = {value}\n")
    assert_names(refusal(config=str(config), sections=CHANNEL), key, str(config))
    config.write_text("")
    (tmp_path / "c.local.toml").write_text(f"[taotoken]\n{key} = {value}\n")
    assert_names(refusal(config=str(config), sections=CHANNEL), key, str(tmp_path / "c.local.toml"))
    settings_key = {"base_url": "api_base"}.get(key, key)
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({settings_key: json.loads(value)}))
    assert_names(refusal(settings=str(settings), sections=CHANNEL), settings_key, str(settings))
    var = {"base_url": "TMIN_BASE_URL", "protocol": "TMIN_PROTOCOL"}.get(key)
    if var:
        assert_names(refusal(env={var: json.loads(value)}, sections=CHANNEL), var, var)


# ----------------------------------------------------------------------------- refusals made after loading
GB = 10 ** 9
AVAILABLE = 2 * GB  # the base model (about 0.25 GB) and relative tables of k = 100,000 (1.2 GB) fit
RELATIVE = {"model.positional": '"relative"'}


def loaded(tmp_path: Path, file: dict, sets: dict):
    """The config of a project whose config.toml holds `file` and whose --set items are `sets`."""
    tables: dict[str, str] = {}
    for key, value in file.items():
        section, name = key.split(".")
        tables[section] = tables.get(section, "") + f"{name} = {value}\n"
    (tmp_path / "config.toml").write_text("".join(f"[{section}]\n{body}" for section, body in tables.items()))
    return load_project("config.toml", env={}, sets=[f"{k}={v}" for k, v in sets.items()]).config, "config.toml"


# (check, key the refusal must name, its value, other values, the refusal's words)
AFTER_LOADING = [
    (lambda c: check_model_memory(c, available=AVAILABLE), "model.relative_clip", "100000000", RELATIVE,
     "parameters and buffers"),
    (lambda c: check_model_memory(c, available=AVAILABLE), "model.d_model", "100000", {}, "parameters and buffers"),
    (lambda c: check_model_memory(c, available=AVAILABLE, stages=True), "verify.seq_len", "100000", {},
     "[verify] sizes"),
    (lambda c: check_model_memory(c, available=AVAILABLE, stages=True), "attention.seq_len", "100000", {},
     "[attention] demo"),
    (lambda c: check_batch_memory(c, available=AVAILABLE), "model.relative_clip", "100000", RELATIVE,
     "one batch's activations"),
    (lambda c: check_batch_memory(c, available=AVAILABLE), "train.batch_tokens", "100000000", {},
     "one batch's activations"),
    (lambda c: check_verify_lengths(c, ["positional"]), "verify.seq_len", "600", {}, "model.max_len"),
]


@pytest.mark.parametrize("check, key, value, others, words", AFTER_LOADING,
                         ids=[f"{case[1]}-{case[4]}" for case in AFTER_LOADING])
def test_a_refusal_after_loading_names_the_key_and_its_source(check, key, value, others, words, tmp_path):
    """--set (over a config.toml that does not hold the key), config.toml, a checkpoint's config."""
    for file, sets, source, not_source in ((others, {key: value}, f"--set {key}={value}: ", "config.toml"),
                                           ({**others, key: value}, {}, "config.toml: ", "--set")):
        cfg, path = loaded(tmp_path, file, sets)
        with pytest.raises(ConfigError) as e:
            check(cfg)
        message = str(e.value)
        assert message.startswith(source), message
        assert_names(message, f"{key} = ", source, not_source)
        assert words in message and (f"fix: lower {key}" in message or f"fix: raise" in message), message
    tables: dict[str, dict] = {}
    for k, v in {**others, key: value}.items():
        tables.setdefault(k.split(".")[0], {})[k.split(".")[1]] = json.loads(v)
    saved = config_from_dict(tables, source="checkpoint runs/x/checkpoints/step_0000002.pt")
    with pytest.raises(ConfigError) as e:
        check(saved)
    assert_names(str(e.value), key, "checkpoint runs/x/checkpoints/step_0000002.pt", "config.toml")


def test_the_relative_tables_of_a_batch_name_relative_clip_and_not_batch_tokens(tmp_path):
    """Issue 38: a run whose relative_clip makes the tables too large was told to lower train.batch_tokens."""
    cfg, _ = loaded(tmp_path, {"train.batch_tokens": "2048"}, {**RELATIVE, "model.relative_clip": "100000"})
    check_model_memory(cfg, available=AVAILABLE)  # the tables themselves fit: 2 x 12 x 200,001 x 64 values
    with pytest.raises(ConfigError) as e:
        check_batch_memory(cfg, available=AVAILABLE)
    message = str(e.value)
    assert message.startswith("--set model.relative_clip=100000: model.relative_clip = 100,000:"), message
    assert "fix: lower model.relative_clip" in message and "fix: lower train.batch_tokens" not in message


def test_a_built_in_default_is_blamed_on_no_file(tmp_path):
    cfg, _ = loaded(tmp_path, {}, {"model.max_len": "8"})
    with pytest.raises(ConfigError) as e:
        check_verify_lengths(cfg, ["positional"])
    assert str(e.value).startswith("--set model.max_len=8: verify.seq_len = 16"), str(e.value)


def test_a_value_a_command_flag_set_is_not_blamed_on_the_file(tmp_path):
    cfg, path = loaded(tmp_path, {"train.steps": "5", "train.seed": "3"}, {})
    assert origin_of(cfg, "train.steps") == f"{path}: "
    flagged = with_overrides(cfg, "train", steps=9, seed=3)
    assert origin_of(flagged, "train.steps") == "" and origin_of(flagged, "train.seed") == f"{path}: "


def test_a_set_over_a_checkpoint_config_names_its_item(tmp_path):
    """tmin eval --set data.src_lang=de over a checkpoint trained en -> de: the --set item, over the checkpoint."""
    project = load_project(None, env={}, quiet=True, sets=["data.src_lang=de"])
    saved = config_from_dict({"data": {"src_lang": "en", "tgt_lang": "de"}}, source="checkpoint runs/x/ckpt.pt")
    with pytest.raises(ConfigError) as e:
        with_sets(saved, project, ("decode", "data"), "tmin eval")
    assert str(e.value).startswith("--set data.src_lang=de (over checkpoint runs/x/ckpt.pt): data.tgt_lang"), str(e.value)
    ok = with_sets(saved, load_project(None, env={}, quiet=True, sets=["decode.beam_size=3"]), ("decode",), "x")
    assert origin_of(ok, "decode.beam_size") == "--set decode.beam_size=3: "
