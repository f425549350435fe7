"""Sections that a higher layer owns, declared there as a `Section` and handed to the one loader:
`load_project(..., sections=(SECTION,))`. core names no such section itself.

The loader reads a section from every source once and layers its values field by field, lowest first:
config.toml [name] < <config>.local.toml [name] (git-ignored: a secret's home) < settings.json < environment <
--set name.KEY. Each value is validated by the section's own `check` wherever it comes from (one value, one
message), and comes out as a `Setting` that says where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.schema import note


@dataclass(frozen=True)
class Setting:
    """One value of a registered section and where it came from (`source`, as messages show it; `path`, the
    file, if any)."""

    value: Any = field(repr=False)
    source: str
    path: Path | None = None


@dataclass(frozen=True)
class Section:
    """A config section declared by the layer that uses it. `check(field, value, where)` validates one value
    and returns it normalised (raising ConfigError naming `where`); `aliases` are config.toml's other names of
    a field; `settings_keys` maps a settings.json key to its field, `settings_aliases` another spelling of such
    a key to it; `env` lists (variable, field), the first variable set winning for a field; `local_file`: the
    section may sit in the git-ignored <config>.local.toml; `label` names the section's owner in messages."""

    name: str
    fields: tuple[str, ...]
    check: Callable[[str, Any, str], Any]
    aliases: Mapping[str, str] = field(default_factory=dict)
    settings_keys: Mapping[str, str] = field(default_factory=dict)
    settings_aliases: Mapping[str, str] = field(default_factory=dict)
    env: tuple[tuple[str, str], ...] = ()
    local_file: bool = False
    label: str = ""

    def settings_names(self) -> tuple[str, ...]:
        """Every settings.json key of this section, aliases included."""
        return (*self.settings_keys, *self.settings_aliases)

    def cross_names(self) -> dict[str, str]:
        """Names of one field in the other file, which difflib would not match (api_base <-> base_url)."""
        out = {key: name for key, name in self.settings_keys.items() if key != name}
        out.update({name: key for key, name in self.settings_keys.items() if key != name})
        out.update(self.aliases)
        return out


Layer = dict[str, Setting]


def table_layer(section: Section, table: Mapping[str, Any], where: str, path: Path | None) -> Layer:
    """A canonical [name] table (config.toml, a local file) as Settings whose source is `where` plus the key."""
    return {name: Setting(section.check(name, value, f"{section.name}.{name}"), f"{where} {name}", path)
            for name, value in table.items()}


def settings_layer(section: Section, data: Mapping[str, Any], p: Path) -> Layer:
    """settings.json's keys of `section` as Settings; a key's other spelling is read with a note."""
    out: Layer = {}
    for key, value in data.items():
        canonical = section.settings_aliases.get(key, key)
        if canonical not in section.settings_keys:
            continue
        if canonical != key:
            if canonical in data:
                raise ConfigError(tr("{path}: both '{key}' and '{canonical}' are set; fix: keep only '{canonical}'").format(
                    path=p, key=key, canonical=canonical))
            note(tr("{path}: '{key}' read as '{canonical}' (the settings.json name; rename it to silence this note)"
                    ).format(path=p, key=key, canonical=canonical))
        name = section.settings_keys[canonical]
        out[name] = Setting(section.check(name, value, f"{p} {key}"), f"{p} {key}", p)
    return out


def env_layer(section: Section, env: Mapping[str, str]) -> Layer:
    """The section's fields from the environment; an empty variable counts as unset, the first one set wins."""
    out: Layer = {}
    for var, name in section.env:
        if env.get(var) and name not in out:
            out[name] = Setting(section.check(name, env[var], f"env {var}"), f"env {var}")
    return out


def env_names(sections: Iterable[Section]) -> list[str]:
    """Every environment variable the sections read."""
    return [var for s in sections for var, _ in s.env]


def owner_of_settings_key(sections: Iterable[Section], key: str) -> Section | None:
    """The section whose settings.json keys include `key`, if any."""
    return next((s for s in sections if key in s.settings_names()), None)
