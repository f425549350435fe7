"""`load_project`: config.toml, config.local.toml, settings.json, the environment and --set, each read once,
into one typed `Project` (`config`, `runtime`, `channel`) that every command gets.

Precedence, lowest first: the files, the environment, `--set section.key=value`, a command's explicit flags.
The channel's values are layered field by field: config.toml [taotoken] < config.local.toml [taotoken] <
settings.json < environment < --set taotoken.KEY. `num_threads` has one home, settings.json; config.toml's
`[train] num_threads` is read as it (an alias kept for older files), and setting both differently is an error.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from transformer_min.core.config import (
    DEFAULTS_SOURCE,
    Config,
    blame,
    build_config,
    config_path_for,
    merged,
    read_config_file,
)
from transformer_min.core.config_parse import canonical_table, parse_toml, sets_to_tables
from transformer_min.core.errors import ConfigError
from transformer_min.core.keys import SETTINGS_SECTION
from transformer_min.core.runtime_schema import CHANNEL_FIELDS, RuntimeSettings, TaotokenConfig  # noqa: F401
from transformer_min.core.schema import from_dict
from transformer_min.core.settings import (
    ChannelPart,
    Setting,
    SettingsLayers,
    read_settings,
    read_text_file,
    runtime_settings,
)
from transformer_min.core.i18n import tr

@dataclass(frozen=True)
class Project:
    """One command's configuration, loaded once: `config` (config.toml + --set), `runtime` (settings.json +
    TMIN_LOG_LEVEL + --set settings.KEY), `channel` (the LLM channel's layers). `sets` holds the --set tables
    (for a command that takes its config from a checkpoint); `origins` says where a runtime value came from."""

    config: Config = field(default_factory=Config)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    channel: ChannelPart = field(default_factory=ChannelPart)
    config_path: Path | None = None
    settings_path: Path | None = None
    sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """Where runtime `key` came from, as a message names it (default: settings.json's key)."""
        return self.origins.get(key, f"{SETTINGS_SECTION}.{key}")


def local_config_path(config_path: Path | None) -> Path:
    """The git-ignored companion of a config file, for the key: config.toml -> config.local.toml
    (x.toml -> x.local.toml); ./config.local.toml when no config file is used."""
    if config_path is None:
        return Path("config.local.toml")
    return config_path.with_name(f"{config_path.stem}.local.toml")


def read_local_taotoken(path: Path) -> TaotokenConfig:
    """config.local.toml's [taotoken] (the key's git-ignored home); another table there is an error."""
    data = parse_toml(path, read_text_file(path, "config file"))
    others = [name for name in data if name != "taotoken"]
    if others:
        raise ConfigError(tr("{path}: a local file holds only [taotoken] (the key's home), not {others!r}; fix: move it to the main config file").format(path=path, others=others[0]))
    problems: list = []
    table = canonical_table("taotoken", data.get("taotoken", {}), str(path), problems, moved={})
    try:
        if problems:
            raise ConfigError(f"{problems[0][0]}; {problems[0][1]}")
        return from_dict(TaotokenConfig, table, "taotoken")
    except ConfigError as e:
        raise blame(e, {}, str(path)) from None


def taotoken_layer(t: TaotokenConfig, where: str, path: Path | None, skip=()) -> dict[str, Setting]:
    """The fields a [taotoken] table sets, as Settings whose source is `where` plus the key."""
    return {name: Setting(getattr(t, name), f"{where} {name}", path) for name in CHANNEL_FIELDS
            if getattr(t, name) is not None and name not in skip}


def channel_part(cfg: Config, p: Path | None, layers: SettingsLayers, given: Mapping[str, str]) -> ChannelPart:
    """The channel's values over every layer, each Setting naming where it came from."""
    by_set = {k.split(".", 1)[1] for k in given if k.startswith("taotoken.")}
    part = ChannelPart().over(taotoken_layer(cfg.taotoken, f"{p} [taotoken]", p, skip=by_set))
    local = local_config_path(p)
    if local.is_file():
        part = part.over(taotoken_layer(read_local_taotoken(local), f"{local} [taotoken]", local))
    part = part.over(layers.channel_file).over(layers.channel_env)
    return part.over({name: Setting(getattr(cfg.taotoken, name), f"--set {given[f'taotoken.{name}']}")
                      for name in by_set})


def load_project(config: str | os.PathLike | None = None, settings: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, sets: tuple[str, ...] | list[str] = (),
                 default_config: str | os.PathLike | None = None, quiet: bool = False) -> Project:
    """Read every source once and validate it: the one loader. `default_config` is a command's own default
    file (`tmin train --task copy`: configs/copy.toml); `quiet` drops the note that no config.toml was found."""
    env = os.environ if env is None else env
    p = config_path_for(config, env, default_config, quiet)
    moved: dict = {}
    tables = read_config_file(p, moved)
    layers = read_settings(settings, env)
    set_moved: dict = {}
    set_tables, given = sets_to_tables(sets, set_moved)
    set_runtime = {k: (v, given[f"{SETTINGS_SECTION}.{k}"]) for k, v in set_tables.pop(SETTINGS_SECTION, {}).items()}
    set_runtime.update({k: (v, given[written]) for k, (v, written) in set_moved.items()})
    source = str(p) if p else DEFAULTS_SOURCE
    try:
        cfg = build_config(merged(tables, set_tables), source)
    except ConfigError as e:
        raise blame(e, given, str(p) if p else None) from None
    runtime, origins = runtime_settings(layers, moved, set_runtime, source)
    return Project(cfg, runtime, channel_part(cfg, p, layers, given), p, layers.path, set_tables, origins)


def with_sets(cfg: Config | None, project: Project, sections: tuple[str, ...], command: str) -> Config | None:
    """A checkpoint's `cfg` with the project's --set tables of `sections` on top (validated); --set of another
    section is refused: the checkpoint fixes it (with no `sections`, every config --set is refused)."""
    if not project.sets:
        return cfg
    other = sorted(name for name in project.sets if name not in sections)
    if other and not sections:
        raise ConfigError(tr("--set {other}.*: {command} reads no config key; fix: drop it").format(other=other[0], command=command))
    if other:
        raise ConfigError(tr("--set {other}.*: {command} reads [{other}] from its checkpoint; fix: drop it (only {items} can be set here)").format(other=other[0], command=command, items=', '.join((f'[{s}]' for s in sections))))
    tables = {name: {**dataclasses.asdict(getattr(cfg, name)), **table} for name, table in project.sets.items()}
    try:
        return dataclasses.replace(cfg, **{name: from_dict(type(getattr(cfg, name)), t, name)
                                           for name, t in tables.items()})
    except ConfigError as e:
        raise ConfigError(f"--set: {e}") from None
