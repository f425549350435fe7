"""settings.json, and reading the files tmin is pointed at: one loader that knows every settings key.

settings.json holds the runtime options (`log_level`, `device`, `num_threads`) and the LLM channel's keys
(`api_base`, `api_key`, `model`, `timeout`, `protocol`). One loader reads it once, checks every key against
all of them (every unknown key reported at once, each with the nearest name), validates every value, and
hands each consumer its typed part: `RuntimeSettings` to the command line, `ChannelFileSettings` to the
channel, which merges it with config.toml `[taotoken]` and the environment.

Nothing here imports torch or httpx.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.schema import fail, from_dict, hint, note, unknown_keys_error

DEFAULT_CONFIG_NAME = "config.toml"
DEFAULT_SETTINGS_NAME = "settings.json"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
RUNTIME_KEYS = ("device", "language", "log_level", "num_threads")
CHANNEL_KEYS = ("api_base", "api_key", "model", "protocol", "timeout")
# Other names for a key: the posts write config.toml's spelling `base_url` in settings.json too.
SETTINGS_ALIASES = {"base_url": "api_base"}
PROTOCOLS = ("openai", "anthropic")
DEFAULT_BASE_URL = "https://taotoken.net/api"


def read_text_file(path: str | os.PathLike, what: str, error: type[ConfigError] = ConfigError) -> str:
    """The UTF-8 text of `path`, or `error` naming the file, what is wrong with it and the fix.

    Covers a missing file, a folder given as a file, bytes that are not UTF-8 (with the line), and an
    unreadable file; `what` is the kind of file ("config file", "settings file").
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: {what} not found; fix: check the path (--config / --settings / TMIN_CONFIG)") from None
    except IsADirectoryError:
        raise error(f"{p}: is a folder, not a {what}; fix: give the path of the file itself") from None
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror or e}); fix: check its permissions") from None
    if b"\x00" in raw[:4096] or raw.startswith((b"PK\x03\x04", b"\x80\x02", b"\x1f\x8b")):
        raise error(f"{p}: a binary file (a checkpoint, an archive?), not a {what}, which is text; "
                    "fix: give the path of the text file itself") from None
    if raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors): not part of the text
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(f"{p} line {line}, column {column}: the {what} is not UTF-8 text (byte 0x{raw[e.start]:02x}); "
                    "fix: save it as UTF-8") from None


def parse_json_object(path: Path, text: str, expected: str, error: type[ConfigError] = ConfigError) -> dict:
    """`text` (the contents of `path`) as a JSON object, or `error` naming the line, or saying `expected`."""
    if not text.strip():
        raise error(f"{path}: the file is empty; fix: write {{}} in it (no settings) or delete it")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path} line {e.lineno} column {e.colno}: invalid JSON ({e.msg}); fix that line") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected {expected}; fix the file")
    return data


def resolve_config_path(path: str | os.PathLike | None, env: Mapping[str, str] | None = None) -> Path:
    """--config PATH, else $TMIN_CONFIG, else ./config.toml (which may not exist)."""
    env = os.environ if env is None else env
    return Path(path or env.get("TMIN_CONFIG") or DEFAULT_CONFIG_NAME)


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
class RuntimeSettings:
    """Runtime options from settings.json (and TMIN_LOG_LEVEL); the CLI flag wins over both."""

    log_level: str = "INFO"
    device: str = "auto"
    num_threads: int = 0
    language: str = ""  # "en" or "zh" for tmin verify/report; empty: the locale (LANG); --lang wins

    def __post_init__(self) -> None:
        if self.language and self.language.lower().replace("_", "-").split("-")[0] not in ("en", "zh"):
            raise fail("settings.language", f"{self.language!r} is not one of 'en', 'zh'")
        if self.log_level.upper() not in LOG_LEVELS:
            raise fail("settings.log_level", f"{self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise fail("settings.device", f"{self.device!r} is not one of 'auto', 'cpu', 'cuda'")
        if self.num_threads < 0:
            raise fail("settings.num_threads", f"must be >= 0 (0 = torch's default), got {self.num_threads}")


@dataclass(frozen=True)
class ChannelFileSettings:
    """The channel's keys of settings.json, validated; None = not set. `written` maps each field set to
    the key as the file spells it (`api_base` or its alias `base_url` for the field base_url)."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    protocol: str | None = None
    timeout: float | None = None
    written: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """settings.json read once: `runtime` for the command line, `channel` for the LLM channel."""

    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    channel: ChannelFileSettings = field(default_factory=ChannelFileSettings)
    path: Path | None = None


def check_channel_value(name: str, value: Any, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """Validate one channel value (`name` is the field: base_url, api_key, model, timeout, protocol);
    return it normalised. Never puts a key's value into a message."""
    if name == "timeout":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise error(f"{where}: timeout must be a positive number of seconds, got {value!r}; fix: e.g. timeout = 30")
        return float(value)
    if not isinstance(value, str):
        shown = "a non-string value" if name == "api_key" else repr(value)
        raise error(f"{where}: {name} must be a string, got {shown}; fix: quote it")
    if name == "protocol":
        if value.strip().lower() not in PROTOCOLS:
            raise error(f"{where}: protocol {value!r} is not one of {', '.join(PROTOCOLS)}; fix: protocol = \"openai\"")
        return value.strip().lower()
    if name in ("model", "base_url") and not value.strip():
        raise error(f"{where}: {name} is empty; fix: remove the line to use the default")
    if name == "base_url":
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
        except ValueError as e:  # "http://[::1" (an unclosed IPv6 bracket), "http://host:99999"
            raise error(f"{where}: base_url {value!r} is not a valid URL ({e}); fix: e.g. {DEFAULT_BASE_URL}") from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise error(f"{where}: base_url {value!r} is not an http(s) URL; fix: e.g. {DEFAULT_BASE_URL}")
        return value.strip()
    return value if name == "api_key" else value.strip()


def _settings_key_hint(name: str) -> str:
    """Where an unknown settings.json key belongs (a config.toml key), or the nearest settings key."""
    from transformer_min.core.config import key_homes  # config.toml's sections (no cycle at import time)

    homes = key_homes(name)
    if homes:
        return f"it belongs in config.toml {' or '.join(f'[{h}]' for h in homes)}; move it there"
    return hint(name, [*RUNTIME_KEYS, *CHANNEL_KEYS], label="allowed keys")


def read_settings(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
                  error: type[ConfigError] = ConfigError) -> Settings:
    """Read settings.json (--settings PATH, else ./settings.json if present) and TMIN_LOG_LEVEL.

    Every key is checked against every settings key, the runtime's and the channel's; all unknown keys
    are reported in one error. `error` is the exception class (the channel passes its own).
    """
    env = os.environ if env is None else env
    p = Path(path) if path else Path(DEFAULT_SETTINGS_NAME)
    data: dict = {}
    if path or p.exists():
        data = parse_json_object(p, read_text_file(p, "settings file", error),
                                 "a JSON object {...} at the top level (see settings.example.json)", error)
    unknown = [(f"unknown key '{k}'", _settings_key_hint(k)) for k in data
               if k not in RUNTIME_KEYS and k not in CHANNEL_KEYS and k not in SETTINGS_ALIASES]
    if unknown:
        raise error(str(unknown_keys_error(f"{p}: ", unknown)))
    channel: dict[str, Any] = {}
    written: dict[str, str] = {}
    for key, value in data.items():
        if key in RUNTIME_KEYS:
            continue
        canonical = SETTINGS_ALIASES.get(key, key)
        if canonical != key:
            if canonical in data:
                raise error(f"{p}: both '{key}' and '{canonical}' are set; fix: keep only '{canonical}'")
            note(tr("{path}: '{key}' read as '{canonical}' (the settings.json name; rename it to silence this note)"
                    ).format(path=p, key=key, canonical=canonical))
        name = "base_url" if canonical == "api_base" else canonical
        channel[name] = check_channel_value(name, value, f"{p} {key}", error)
        written[name] = key
    runtime = {k: v for k, v in data.items() if k in RUNTIME_KEYS}
    try:
        runtime_settings = from_dict(RuntimeSettings, runtime, "settings")
    except ConfigError as e:
        raise error(f"{p}: {e}") from None
    level = env.get("TMIN_LOG_LEVEL")
    if level:
        if level.upper() not in LOG_LEVELS:
            raise error(f"environment variable TMIN_LOG_LEVEL={level!r} is not one of {', '.join(LOG_LEVELS)}; "
                        "fix: set it to one of them (e.g. TMIN_LOG_LEVEL=INFO) or unset it")
        runtime_settings = RuntimeSettings(level, runtime_settings.device, runtime_settings.num_threads)
    return Settings(runtime_settings, ChannelFileSettings(**channel, written=written),
                    p if data or path else None)


def load_settings(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> RuntimeSettings:
    """The runtime part of settings.json (see `read_settings`); TMIN_LOG_LEVEL overrides its log_level."""
    return read_settings(path, env).runtime
