"""Reading the files tmin is pointed at, settings.json and the environment (each once), for the one loader.

settings.json holds the runtime options (`log_level`, `num_threads`, `language`) and the keys of the sections
a higher layer registers (`core.sections`). Every key is checked against `core.keys` and those sections (every
unknown key reported at once, each with the nearest name or the config.toml section it belongs in), every
value is validated, and a section's values come out as `Setting`s that say where each came from.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.keys import (
    REMOVED_SETTINGS,
    RUNTIME_KEYS,
    SETTINGS_SECTION,
    Sections,
    settings_key_hint,
    unknown_env_names,
)
from transformer_min.core.runtime_schema import LOG_LEVELS, RuntimeSettings
from transformer_min.core.schema import from_dict, note, unknown_keys_error
from transformer_min.core.sections import env_layer, settings_layer

DEFAULT_CONFIG_NAME = "config.toml"
DEFAULT_SETTINGS_NAME = "settings.json"


def read_text_file(path: str | os.PathLike, what: str, error: type[ConfigError] = ConfigError) -> str:
    """The UTF-8 text of `path`, or `error` naming the file, what is wrong with it and the fix.

    Covers a missing file, a folder given as a file, bytes that are not UTF-8 (with the line), and an
    unreadable file; `what` is the kind of file ("config file", "settings file").
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise error(tr("{p}: {what} not found; fix: check the path (--config / --settings / TMIN_CONFIG)").format(
            p=p, what=tr(what))) from None
    except IsADirectoryError:
        raise error(tr("{p}: is a folder, not a {what}; fix: give the path of the file itself").format(
            p=p, what=tr(what))) from None
    except OSError as e:
        raise error(tr("{p}: cannot read the {what} ({reason}); fix: check its permissions").format(
            p=p, what=tr(what), reason=e.strerror or e)) from None
    if b"\x00" in raw[:4096] or raw.startswith((b"PK\x03\x04", b"\x80\x02", b"\x1f\x8b")):
        raise error(tr("{p}: a binary file (a checkpoint, an archive?), not a {what}, which is text; "
                       "fix: give the path of the text file itself").format(p=p, what=tr(what))) from None
    if raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors): not part of the text
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(tr("{p} line {line}, column {column}: the {what} is not UTF-8 text (byte 0x{byte:02x}); "
                       "fix: save it as UTF-8").format(p=p, line=line, column=column, what=tr(what),
                                                      byte=raw[e.start])) from None


def parse_json_object(path: Path, text: str, expected: str, error: type[ConfigError] = ConfigError) -> dict:
    """`text` (the contents of `path`) as a JSON object, or `error` naming the line, or saying `expected`."""
    if not text.strip():
        raise error(tr("{path}: the file is empty; fix: write {{}} in it (no settings) or delete it").format(path=path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(tr("{path} line {line} column {column}: invalid JSON ({reason}); fix that line").format(
            path=path, line=e.lineno, column=e.colno, reason=e.msg)) from None
    if not isinstance(data, dict):
        raise error(tr("{path}: expected {expected}; fix the file").format(path=path, expected=tr(expected)))
    return data


def resolve_config_path(path: str | os.PathLike | None, env: Mapping[str, str] | None = None,
                        default_config: str | os.PathLike | None = None) -> Path:
    """--config PATH, else the command's own default file (`tmin train --task copy`: configs/copy.toml), else
    $TMIN_CONFIG, else ./config.toml (which may not exist)."""
    env = os.environ if env is None else env
    return Path(path or default_config or env.get("TMIN_CONFIG") or DEFAULT_CONFIG_NAME)


def resolve_paths(config: str | None, settings: str | None,
                  env: Mapping[str, str] | None = None) -> tuple[Path | None, Path | None]:
    """The files to read, (config.toml or None, settings.json or None).

    config: the argument, else $TMIN_CONFIG, else ./config.toml if it exists.
    settings: the argument, else ./settings.json if it exists.
    """
    env = os.environ if env is None else env
    config_path = resolve_config_path(config, env)
    explicit = bool(config or env.get("TMIN_CONFIG"))
    settings_path = Path(settings) if settings else Path(DEFAULT_SETTINGS_NAME)
    return (config_path if explicit or config_path.is_file() else None,
            settings_path if settings or settings_path.is_file() else None)


@dataclass(frozen=True)
class SettingsLayers:
    """settings.json and the environment, read once: the runtime's raw values (validated when the loader
    builds `RuntimeSettings`), where each came from, and each registered section's layers from the file and
    the environment ({section name: {field: Setting}})."""

    runtime: dict = field(default_factory=dict)
    runtime_sources: dict = field(default_factory=dict)
    section_file: dict = field(default_factory=dict)
    section_env: dict = field(default_factory=dict)
    path: Path | None = None


def settings_problems(data: Mapping[str, Any], p: Path, sections: Sections = ()) -> None:
    """Every unknown key of settings.json at once, a removed key with its replacement."""
    for key, fix in REMOVED_SETTINGS.items():
        if key in data:
            raise ConfigError(tr("{p}: settings.{key} = {data!r}: no longer read; fix: {fix}").format(p=p, key=key, data=data[key], fix=tr(fix)))
    known = {*RUNTIME_KEYS, *(k for s in sections for k in s.settings_names())}
    unknown = [(tr("unknown key '{key}'").format(key=k), settings_key_hint(k, sections)) for k in data if k not in known]
    if unknown:
        raise unknown_keys_error(f"{p}: ", unknown)


def read_settings(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
                  sections: Sections = ()) -> SettingsLayers:
    """Read settings.json (--settings PATH, else ./settings.json if present) and the environment, once;
    `sections`: the registered sections, whose keys and variables are read too."""
    env = os.environ if env is None else env
    p = Path(path) if path else Path(DEFAULT_SETTINGS_NAME)
    data: dict = {}
    if path or p.exists():
        data = parse_json_object(p, read_text_file(p, "settings file"),
                                 "a JSON object {...} at the top level (see settings.example.json)")
    settings_problems(data, p, sections)
    runtime = {k: v for k, v in data.items() if k in RUNTIME_KEYS}
    sources = {k: f"{p} {k}" for k in runtime}
    level = env.get("TMIN_LOG_LEVEL")
    if level:
        if level.upper() not in LOG_LEVELS:
            raise ConfigError(tr("environment variable TMIN_LOG_LEVEL={level!r} is not one of {items}; fix: set it to one of them (e.g. TMIN_LOG_LEVEL=INFO) or unset it").format(level=level, items=', '.join(LOG_LEVELS)))
        runtime["log_level"], sources["log_level"] = level, "env TMIN_LOG_LEVEL"
    for name, near in unknown_env_names(env, sections):
        fix = tr("; did you mean {near}?").format(near=near) if near else ""
        note(tr("environment variable {name} is not one tmin reads (ignored){fix}").format(name=name, fix=fix))
    return SettingsLayers(runtime, sources, {s.name: settings_layer(s, data, p) for s in sections},
                          {s.name: env_layer(s, env) for s in sections}, p if data or path else None)


def runtime_settings(layers: SettingsLayers, moved: dict | None = None, set_runtime: dict | None = None,
                     config_source: str = "") -> tuple[RuntimeSettings, dict]:
    """RuntimeSettings over settings.json < config.toml's alias ([train] num_threads) < env < --set settings.KEY.

    `moved` and `set_runtime` map a key to (value, where it was written); returns the settings and, per key
    not from settings.json, where it came from ("train.num_threads", "--set settings.log_level")."""
    moved, set_runtime = moved or {}, set_runtime or {}
    values, origins = dict(layers.runtime), {}
    prefix = {k: str(layers.path) for k in layers.runtime if layers.runtime_sources[k] != "env TMIN_LOG_LEVEL"}
    for key, (value, written) in moved.items():
        if key in layers.runtime and layers.runtime[key] != value and key not in set_runtime:
            raise ConfigError(tr("{key} is set twice: {config_source} {written} = {value!r} and {path} {key} = {runtime!r}; fix: keep it in settings.json only (its one home)").format(key=key, config_source=config_source, written=written, value=value, path=layers.path, runtime=layers.runtime[key]))
        values[key], origins[key], prefix[key] = value, written, config_source
    for key, (value, item) in set_runtime.items():
        values[key], origins[key], prefix[key] = value, f"--set {item.split('=', 1)[0].strip()}", f"--set {item}"
    try:
        return from_dict(RuntimeSettings, values, SETTINGS_SECTION), origins
    except ConfigError as e:
        where = prefix.get(str(e).split(":", 1)[0].split(".")[-1])
        raise ConfigError(f"{where}: {e}" if where else str(e)) from None
