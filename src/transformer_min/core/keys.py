"""Every key core reads, in one place: config.toml's sections, settings.json's keys, the environment's names.

The loader (`transformer_min.core.project`) checks every file, variable and `--set` against these tables and
the sections a higher layer hands it (`core.sections.Section`), so a misspelling anywhere gets
the nearest known name with its section, and a key written in the wrong section (or the wrong file) gets the
section (or file) it belongs in.
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
    TrainConfig,
)
from transformer_min.core.schema import hint
from transformer_min.core.sections import Section, env_names, owner_of_settings_key

# config.toml: section -> its dataclass (in the order a flat file of hyperparameters is placed)
SECTIONS: dict[str, type] = {
    "model": ModelConfig, "vocab": VocabConfig, "train": TrainConfig, "decode": DecodeConfig, "data": DataConfig,
    "verify": VerifyConfig, "attention": AttentionDemoConfig,
}
SECTION_KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}
# A flat file of hyperparameters (post 003's JSON) puts a key found in several sections here first.
FLAT_ORDER = ("model", "vocab", "train", "decode", "data", "verify", "attention")

# The paper-reading posts' key names -> ours, per section (read with a note naming ours).
ALIASES: dict[str, dict[str, str]] = {
    "model": {"n_heads": "num_heads", "max_seq_length": "max_len"},
    "attention": {"n_heads": "num_heads"},
    "vocab": {"src_vocab_size": "src_size", "tgt_vocab_size": "tgt_size"},
}
# A config.toml key whose one home is settings.json, read there (with a note): section -> {key: settings key}.
MOVED_TO_SETTINGS = {"train": {"num_threads": "num_threads"}}

# settings.json: the runtime's keys (RuntimeSettings; "settings" is their section for --set and in messages);
# a registered section adds its own (`Section.settings_keys`).
SETTINGS_SECTION = "settings"
RUNTIME_KEYS = tuple(f.name for f in dataclasses.fields(RuntimeSettings))
# Keys that were read once and are gone: key -> the fix naming the replacement.
REMOVED_SETTINGS = {
    "device": "the device is chosen in config.toml: [train] device = \"auto\" | \"cpu\" | \"cuda\" (or tmin train "
              "--device cuda, or --set train.device=cuda); delete \"device\" from settings.json",
}
# The environment: variable -> what it sets (a registered section adds its own, `Section.env`).
ENV_VARS = {
    "TMIN_CONFIG": "the config file (--config wins)",
    "TMIN_LOG_LEVEL": "settings.log_level",
    "TMIN_CACHE_DIR": "where per-machine measurements are cached",
}
Sections = tuple[Section, ...]


def cross_names(sections: Sections) -> dict[str, str]:
    """Names from the other file, which difflib would not match, over the registered sections."""
    return {k: v for s in sections for k, v in s.cross_names().items()}


def key_homes(key: str, exclude: str = "") -> list[str]:
    """The sections (other than `exclude`) that have `key` or an alias of that name, in FLAT_ORDER."""
    return [name for name in FLAT_ORDER
            if name != exclude and (key in SECTION_KEYS[name] or key in ALIASES.get(name, {}))]


def config_key_hint(section: str, key: str, sections: Sections = ()) -> str:
    """The fix for an unknown config key `section.key`: the section it belongs in, else the nearest key there
    (`section` "settings" is settings.json's runtime part, as `--set settings.KEY` names it)."""
    homes = key_homes(key, exclude=section)
    if homes:
        return tr("it belongs in {sections}; move it there").format(sections=tr(" or ").join(f"[{h}]" for h in homes))
    owner = owner_of_settings_key(sections, key)
    if section == SETTINGS_SECTION and owner:
        name = owner.settings_keys[owner.settings_aliases.get(key, key)]
        return tr("{owner}'s keys are {section}.KEY: --set {section}.{name}=...").format(
            owner=tr(owner.label), section=owner.name, name=name)
    extra = {s.name: list(s.fields) for s in sections}
    known = list(RUNTIME_KEYS) if section == SETTINGS_SECTION else SECTION_KEYS.get(section) or extra[section]
    cross = cross_names(sections).get(key)
    near = cross if cross in known else next(iter(difflib.get_close_matches(key, known, n=1, cutoff=0.5)), None)
    return tr("did you mean {near!r}? ({section}.{near})").format(near=near, section=section) if near else hint(key, known)


def section_hint(name: str, sections: Sections = ()) -> str:
    """The fix for an unknown section name (config.toml tables and --set's `settings`)."""
    return hint(name, [*SECTIONS, *(s.name for s in sections), SETTINGS_SECTION], label="sections")


def settings_key_hint(name: str, sections: Sections = ()) -> str:
    """Where an unknown settings.json key belongs (a config.toml key), or the nearest settings key."""
    homes = key_homes(name)
    cross_all = cross_names(sections)
    if homes and name not in cross_all:
        return tr("it belongs in config.toml {sections}; move it there").format(
            sections=tr(" or ").join(f"[{h}]" for h in homes))
    allowed = [*RUNTIME_KEYS, *(k for s in sections for k in s.settings_keys)]
    cross = cross_all.get(name)
    return tr("did you mean {name!r}?").format(name=cross) if cross in allowed else hint(name, allowed, label="allowed keys")


def unknown_env_names(env, sections: Sections = ()) -> list[tuple[str, str]]:
    """(variable, nearest known variable) for each TMIN_* variable tmin does not read (a misspelling)."""
    known = [*ENV_VARS, *env_names(sections)]
    out = []
    for name in sorted(env):
        if name.startswith("TMIN_") and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            out.append((name, close[0] if close else ""))
    return out
