"""`load_project`: config.toml, config.local.toml, settings.json, the environment and --set, each read once,
into one typed `Project` (`config`, `runtime`, `sections`) that every command gets.

Precedence, lowest first: the files, the environment, `--set section.key=value`, a command's explicit flags.
A section that a higher layer owns (`core.sections.Section`, handed over as `sections=`) is layered field
by field: config.toml [name] < config.local.toml [name] < settings.json < environment < --set name.KEY.
`num_threads` has one home, settings.json; config.toml's `[train] num_threads` is read as it (an alias kept
for older files), and setting both differently is an error.
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
from transformer_min.core.runtime_schema import RuntimeSettings
from transformer_min.core.schema import from_dict
from transformer_min.core.sections import Section, Setting, table_layer
from transformer_min.core.secrets import remember
from transformer_min.core.settings import (
    SettingsLayers,
    read_settings,
    read_text_file,
    runtime_settings,
)
from transformer_min.core.i18n import tr

@dataclass(frozen=True)
class Project:
    """One command's configuration, loaded once: `config` (config.toml + --set), `runtime` (settings.json +
    TMIN_LOG_LEVEL + --set settings.KEY), `sections` (each registered section's values over its layers, as
    {name: {field: Setting}}). `sets` holds the --set tables of `config` (for a command that takes its config
    from a checkpoint); `origins` says where a runtime value came from."""

    config: Config = field(default_factory=Config)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    sections: Mapping[str, Mapping[str, Setting]] = field(default_factory=dict)
    config_path: Path | None = None
    settings_path: Path | None = None
    sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """Where runtime `key` came from, as a message names it (default: settings.json's key)."""
        return self.origins.get(key, f"{SETTINGS_SECTION}.{key}")

    def section(self, name: str) -> Mapping[str, Setting]:
        """The values of registered section `name` ({field: Setting}, a field set nowhere left out)."""
        if name not in self.sections:
            raise KeyError(f"section [{name}] was not handed to load_project(sections=...)")
        return self.sections[name]


def local_config_path(config_path: Path | None) -> Path:
    """The git-ignored companion of a config file, for secrets: config.toml -> config.local.toml
    (x.toml -> x.local.toml); ./config.local.toml when no config file is used."""
    if config_path is None:
        return Path("config.local.toml")
    return config_path.with_name(f"{config_path.stem}.local.toml")


def read_local_section(section: Section, path: Path) -> dict[str, Setting]:
    """<config>.local.toml's [name] (a secret's git-ignored home) as Settings; another table there is an error."""
    data = parse_toml(path, read_text_file(path, "config file"))
    others = [name for name in data if name != section.name]
    if others:
        raise ConfigError(tr("{path}: a local file holds only [{section}] (the git-ignored home of secrets), not {other!r}; "
                             "fix: move it to the main config file").format(path=path, section=section.name, other=others[0]))
    problems: list = []
    table = canonical_table(section.name, data.get(section.name, {}), str(path), problems, {}, (section,))
    try:
        if problems:
            raise ConfigError(tr("{where}{what}; {fix}").format(where="", what=problems[0][0], fix=problems[0][1]))
        return table_layer(section, table, f"{path} [{section.name}]", path)
    except ConfigError as e:
        raise blame(e, {}, str(path)) from None


def section_values(section: Section, table: Mapping[str, Any], set_table: Mapping[str, Any], p: Path | None,
                   layers: SettingsLayers, given: Mapping[str, str]) -> dict[str, Setting]:
    """A registered section's values over every layer, each Setting naming where it came from."""
    try:
        values = table_layer(section, table, f"{p} [{section.name}]", p)
    except ConfigError as e:
        raise blame(e, {}, str(p)) from None
    local = local_config_path(p)
    if section.local_file and local.is_file():
        values.update(read_local_section(section, local))
    file_layer, env_layer = layers.section_file.get(section.name, {}), layers.section_env.get(section.name, {})
    remember(*(layer["api_key"].value for layer in (values, file_layer, env_layer) if "api_key" in layer))
    values.update(file_layer)  # every source's key is remembered above, for the output boundary (core/secrets.py)
    values.update(env_layer)
    try:
        values.update({name: Setting(section.check(name, value, f"{section.name}.{name}"),
                                     f"--set {given[f'{section.name}.{name}']}") for name, value in set_table.items()})
    except ConfigError as e:
        raise blame(e, given, None) from None
    remember(*(s.value for name, s in values.items() if name == "api_key"))
    return values


def load_project(config: str | os.PathLike | None = None, settings: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, sets: tuple[str, ...] | list[str] = (),
                 default_config: str | os.PathLike | None = None, quiet: bool = False,
                 sections: tuple[Section, ...] = ()) -> Project:
    """Read every source once and validate it: the one loader. `default_config` is a command's own default
    file (`tmin train --task copy`: configs/copy.toml); `quiet` drops the note that no config.toml was found;
    `sections` are the sections a higher layer owns (`core.sections.Section`), read from every source too."""
    env = os.environ if env is None else env
    p = config_path_for(config, env, default_config, quiet)
    moved: dict = {}
    tables = read_config_file(p, moved, sections)
    layers = read_settings(settings, env, sections)
    set_moved: dict = {}
    set_tables, given = sets_to_tables(sets, set_moved, sections)
    set_runtime = {k: (v, given[f"{SETTINGS_SECTION}.{k}"]) for k, v in set_tables.pop(SETTINGS_SECTION, {}).items()}
    set_runtime.update({k: (v, given[written]) for k, (v, written) in set_moved.items()})
    own = {s.name: (tables.pop(s.name, {}), set_tables.pop(s.name, {})) for s in sections}
    source = str(p) if p else DEFAULTS_SOURCE
    origins = {f"{name}.{key}": source for name, table in tables.items() for key in table}
    origins.update({f"{name}.{key}": f"--set {given[f'{name}.{key}']}" for name, table in set_tables.items() for key in table})
    try:
        cfg = build_config(merged(tables, set_tables), source, origins)
    except ConfigError as e:
        raise blame(e, given, str(p) if p else None) from None
    runtime, origins = runtime_settings(layers, moved, set_runtime, source)
    values = {s.name: section_values(s, *own[s.name], p, layers, given) for s in sections}
    return Project(cfg, runtime, values, p, layers.path, set_tables, origins)


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
    sets = {f"{name}.{key}": project.config.origins.get(f"{name}.{key}", "--set")
            for name, table in project.sets.items() for key in table}
    try:
        return dataclasses.replace(cfg, **{name: from_dict(type(getattr(cfg, name)), t, name)
                                           for name, t in tables.items()}, origins={**cfg.origins, **sets})
    except ConfigError as e:
        given = {key: item.removeprefix("--set ") for key, item in sets.items()}
        raise blame(e, given, cfg.source) from None
