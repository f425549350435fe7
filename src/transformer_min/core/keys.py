"""Every key tmin reads, in one place: config.toml's sections, settings.json's keys, the environment's names.

The loader (`transformer_min.core.config`) checks every file, variable and `--set` against these tables, so
a misspelling anywhere gets the nearest known name with its section, and a key written in the wrong
section (or the wrong file) gets the section (or file) it belongs in.
"""

from __future__ import annotations

import dataclasses
import difflib

from transformer_min.core.i18n import tr
from transformer_min.core.config_schema import AttentionDemoConfig, ModelConfig, VerifyConfig, VocabConfig
from transformer_min.core.runtime_schema import (
    DataConfig,
    DecodeConfig,
    RuntimeSettings,
    TaotokenConfig,
    TrainConfig,
)
from transformer_min.core.schema import hint

# config.toml: section -> its dataclass (in the order a flat file of hyperparameters is placed)
SECTIONS: dict[str, type] = {
    "model": ModelConfig, "vocab": VocabConfig, "train": TrainConfig, "decode": DecodeConfig, "data": DataConfig,
    "verify": VerifyConfig, "attention": AttentionDemoConfig, "taotoken": TaotokenConfig,
}
SECTION_KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}
# A flat file of hyperparameters (post 003's JSON) puts a key found in several sections here first.
FLAT_ORDER = ("model", "vocab", "train", "decode", "data", "verify", "attention")

# The paper-reading posts' key names -> ours, per section (read with a note naming ours).
ALIASES: dict[str, dict[str, str]] = {
    "model": {"n_heads": "num_heads", "max_seq_length": "max_len"},
    "attention": {"n_heads": "num_heads"},
    "vocab": {"src_vocab_size": "src_size", "tgt_vocab_size": "tgt_size"},
    "taotoken": {"default_model": "model"},
}
# A config.toml key whose one home is settings.json, read there (with a note): section -> {key: settings key}.
MOVED_TO_SETTINGS = {"train": {"num_threads": "num_threads"}}

# settings.json: the runtime's keys (RuntimeSettings; "settings" is their section for --set and in messages)
# and the channel's keys (settings.json spells base_url api_base).
SETTINGS_SECTION = "settings"
RUNTIME_KEYS = tuple(f.name for f in dataclasses.fields(RuntimeSettings))
CHANNEL_KEYS = ("api_base", "api_key", "model", "protocol", "timeout")
SETTINGS_ALIASES = {"base_url": "api_base"}  # the posts write config.toml's spelling in settings.json too
# Keys that were read once and are gone: key -> the fix naming the replacement.
REMOVED_SETTINGS = {
    "device": "the device is chosen in config.toml: [train] device = \"auto\" | \"cpu\" | \"cuda\" (or tmin train "
              "--device cuda, or --set train.device=cuda); delete \"device\" from settings.json",
}
# Names from the other file, which difflib would not match: settings.json says api_base, config.toml base_url.
CROSS_NAMES = {"base_url": "api_base", "api_base": "base_url", "default_model": "model"}

# The environment: variable -> what it sets.
ENV_VARS = {
    "TMIN_CONFIG": "the config file (--config wins)",
    "TMIN_LOG_LEVEL": "settings.log_level",
    "TMIN_API_KEY": "taotoken.api_key", "TAOTOKEN_API_KEY": "taotoken.api_key",
    "TMIN_BASE_URL": "taotoken.base_url", "TMIN_MODEL": "taotoken.model", "TMIN_PROTOCOL": "taotoken.protocol",
    "TMIN_CACHE_DIR": "where per-machine measurements are cached",
}
KEY_ENV_VARS = ("TMIN_API_KEY", "TAOTOKEN_API_KEY")  # first one set wins
CHANNEL_ENV = {"TMIN_BASE_URL": "base_url", "TMIN_MODEL": "model", "TMIN_PROTOCOL": "protocol"}


def key_homes(key: str, exclude: str = "") -> list[str]:
    """The sections (other than `exclude`) that have `key` or an alias of that name, in FLAT_ORDER."""
    return [name for name in FLAT_ORDER
            if name != exclude and (key in SECTION_KEYS[name] or key in ALIASES.get(name, {}))]


def config_key_hint(section: str, key: str) -> str:
    """The fix for an unknown config key `section.key`: the section it belongs in, else the nearest key there
    (`section` "settings" is settings.json's runtime part, as `--set settings.KEY` names it)."""
    homes = key_homes(key, exclude=section)
    if homes:
        return tr("it belongs in {sections}; move it there").format(sections=tr(" or ").join(f"[{h}]" for h in homes))
    if section == SETTINGS_SECTION and (key in CHANNEL_KEYS or key in SETTINGS_ALIASES):
        return tr("the channel's keys are taotoken.KEY: --set taotoken.{key}=...").format(
            key="base_url" if key == "api_base" else key)
    known = list(RUNTIME_KEYS) if section == SETTINGS_SECTION else SECTION_KEYS[section]
    cross = CROSS_NAMES.get(key)
    near = cross if cross in known else next(iter(difflib.get_close_matches(key, known, n=1, cutoff=0.5)), None)
    return tr("did you mean {near!r}? ({section}.{near})").format(near=near, section=section) if near else hint(key, known)


def section_hint(name: str) -> str:
    """The fix for an unknown section name (config.toml tables and --set's `settings`)."""
    return hint(name, [*SECTIONS, SETTINGS_SECTION], label="sections")


def settings_key_hint(name: str) -> str:
    """Where an unknown settings.json key belongs (a config.toml key), or the nearest settings key."""
    homes = key_homes(name)
    if homes and name not in CROSS_NAMES:
        return tr("it belongs in config.toml {sections}; move it there").format(
            sections=tr(" or ").join(f"[{h}]" for h in homes))
    allowed = [*RUNTIME_KEYS, *CHANNEL_KEYS]
    cross = CROSS_NAMES.get(name)
    return tr("did you mean {name!r}?").format(name=cross) if cross in allowed else hint(name, allowed, label="allowed keys")


def unknown_env_names(env) -> list[tuple[str, str]]:
    """(variable, nearest known variable) for each TMIN_* variable tmin does not read (a misspelling)."""
    out = []
    for name in sorted(env):
        if name.startswith("TMIN_") and name not in ENV_VARS:
            close = difflib.get_close_matches(name, list(ENV_VARS), n=1, cutoff=0.6)
            out.append((name, close[0] if close else ""))
    return out
