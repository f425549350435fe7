"""The typed config: `Config` (every config.toml section core knows), read from config.toml or a
flat JSON file of hyperparameters, with `--set section.key=value` items on top; checkpoints' embedded configs.

The defaults are the paper's base model (section 3, Table 3 "base"). Only `build_model` and the command
handlers read a `Config`; modules take explicit, paper-named arguments. The one loader of a command,
`transformer_min.core.project.load_project`, builds on this module: config.toml, settings.json, the environment
and --set, each read once. Precedence, lowest first: the files, the environment, --set, a command's explicit
flags (`tmin train --steps`). Every key is known in `transformer_min.core.keys`.
"""

from __future__ import annotations

import dataclasses
import re
import logging
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from transformer_min.core.config_parse import canonical_sections, parse_config_text, sets_to_tables
from transformer_min.core.config_parse import flat_to_sections  # noqa: F401 - part of the loader's API
from transformer_min.core.config_schema import AttentionDemoConfig, ModelConfig, VerifyConfig, VocabConfig
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.keys import ALIASES, FLAT_ORDER, SECTION_KEYS, SECTIONS, SETTINGS_SECTION  # noqa: F401
from transformer_min.core.keys import Sections, key_homes  # noqa: F401 - key_homes: re-exported
from transformer_min.core.runtime_schema import (  # noqa: F401 - re-exported: the sections' old home
    LOG_LEVELS,
    MAX_ACCUM_STEPS,
    MAX_SEED,
    DataConfig,
    DecodeConfig,
    RuntimeSettings,
    TrainConfig,
)
from transformer_min.core.schema import fail, from_dict
from transformer_min.core.settings import (  # noqa: F401 - re-exported
    DEFAULT_CONFIG_NAME,
    DEFAULT_SETTINGS_NAME,
    parse_json_object,
    read_settings,
    read_text_file,
    resolve_config_path,
    runtime_settings,
)

log = logging.getLogger(__name__)
DEFAULTS_SOURCE = "built-in paper defaults"


@dataclass(frozen=True)
class Config:
    """Everything config.toml holds, typed: the structure and run sections (a section a higher layer registers
    is not part of it: `core.project.Project.section`)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    attention: AttentionDemoConfig = field(default_factory=AttentionDemoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    source: str = DEFAULTS_SOURCE
    # "section.key" -> where its value came from, as messages name it (`origin_of`); not part of the config
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.model.weight_tying == "three_way" and self.vocab.src_size != self.vocab.tgt_size:
            raise fail(
                "model.weight_tying",
                tr('three_way tying needs a shared vocabulary (section 3.4) but vocab.src_size {src_size} != vocab.tgt_size {tgt_size}; set equal sizes or weight_tying = "decoder"').format(src_size=self.vocab.src_size, tgt_size=self.vocab.tgt_size),
            )


def build_config(tables: Mapping[str, dict], source: str, origins: Mapping[str, str] | None = None) -> Config:
    """Canonical tables -> a validated Config; `origins` says where each "section.key" came from (default: every
    key of `tables` from `source`)."""
    if origins is None:
        origins = {f"{name}.{key}": source for name, table in tables.items() for key in table}
    return Config(**{name: from_dict(SECTIONS[name], table, name) for name, table in tables.items()}, source=source,
                  origins=dict(origins))


def origin_of(cfg: Config, *keys: str) -> str:
    """Where the values of config `keys` came from, as the prefix of a message about them: "--set
    model.relative_clip=1000000000: ", "configs/copy.toml: ", "checkpoint runs/x/...: " (each source once, in
    the order of `keys`); "" when every one is a built-in default (or was set by a command's own flag)."""
    found = []
    for key in keys:
        source = cfg.origins.get(key, "")
        if source and source not in ("dict", DEFAULTS_SOURCE) and source not in found:
            found.append(source)
    return ", ".join(found) + ": " if found else ""


def config_from_dict(data: dict, source: str = "dict") -> Config:
    """Validate a nested dict (a parsed config.toml or a checkpoint's embedded config).

    Every unknown key and section is reported in one error; the posts' key names (ALIASES) are read as ours
    with a note. A runtime key an older checkpoint kept in its config (train.num_threads) is left out.
    """
    return build_config(canonical_sections(data, source, moved={}), source)


def config_to_dict(cfg: Config) -> dict:
    """The inverse of `config_from_dict` (tuples become lists)."""
    out = dataclasses.asdict(cfg)
    out.pop("source", None)
    out.pop("origins", None)
    for section in out.values():
        for key, value in list(section.items()):
            if isinstance(value, tuple):
                section[key] = list(value)
    return out


def merged(base: Mapping[str, dict], top: Mapping[str, dict]) -> dict[str, dict]:
    """Tables `top` over tables `base`, key by key."""
    out = {name: dict(table) for name, table in base.items()}
    for name, table in top.items():
        out.setdefault(name, {}).update(table)
    return out


def blame(e: ConfigError, given: Mapping[str, str], source: str | None) -> ConfigError:
    """The error prefixed with what caused it: the --set item that set its key, else the --set items of the
    other keys it names (a check across keys: "num_heads 8 does not divide d_model 100" when --set gave
    d_model), over the file; else the file."""
    message = str(e)
    key = message.split(":", 1)[0]
    if key in given:
        return ConfigError(f"--set {given[key]}: {message}")
    named = [item for k, item in given.items() if k != key and named_in(k, key, message)]
    if named:
        over = tr(" (over {source})").format(source=source) if source else ""
        return ConfigError(", ".join(f"--set {item}" for item in named) + f"{over}: {message}")
    if source is None:
        return ConfigError(f"--set: {message}" if given else message)
    return ConfigError(message if message.startswith(source) else f"{source}: {message}")


def named_in(k: str, key: str, message: str) -> bool:
    """Whether config key `k` ("model.d_model") is named in `message` about `key`: in full, or by its bare name
    when it is of the same section."""
    section, _, name = k.partition(".")
    if re.search(rf"(?<![\w.]){re.escape(k)}\b", message):
        return True
    return key.split(".")[0] == section and re.search(rf"(?<![\w.]){re.escape(name)}\b", message.split(":", 1)[-1]) is not None


def read_config_file(p: Path | None, moved: dict, sections: Sections = ()) -> dict[str, dict]:
    """The canonical tables of config file `p` (None: no file, no tables); `sections`: the registered ones."""
    if p is None:
        return {}
    try:
        text = read_text_file(p, "config file")
        return canonical_sections(parse_config_text(p, text, sections), str(p), moved, sections)
    except ConfigError as e:
        raise blame(e, {}, str(p)) from None


def config_path_for(path, env: Mapping[str, str], default_config, quiet: bool) -> Path | None:
    """The config file to read (`resolve_config_path`); None when it is the default ./config.toml and absent."""
    p = resolve_config_path(path, env, default_config)
    if not (path or default_config or env.get("TMIN_CONFIG")) and not p.exists():
        if not quiet:
            log.warning("%s", tr("no {path} found: using the built-in paper defaults (base model)").format(path=p))
        return None
    return p


def with_overrides(cfg: Config, section: str, **values: Any) -> Config:
    """Return a copy of `cfg` with `section.key = value` for each non-None value (validated)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return cfg
    current = dataclasses.asdict(getattr(cfg, section))
    current.update(values)
    cls = typing.get_type_hints(Config)[section]
    changed = {f"{section}.{k}" for k, v in values.items() if getattr(getattr(cfg, section), k, None) != v}
    origins = {k: v for k, v in cfg.origins.items() if k not in changed}  # a flag's value: no file to name
    return dataclasses.replace(cfg, **{section: from_dict(cls, current, section)}, origins=origins)

