"""Channel settings: read [taotoken] (config.toml, then config.local.toml), settings.json and the environment;
validate; redact.

Precedence, field by field: environment > settings.json > config.local.toml > config.toml > defaults.
settings.json is read by the one settings loader (`transformer_min.core.settings`), which knows every key; the
channel takes its typed part. config.local.toml (git-ignored) is the place for a key kept in a file.
A key is never shown in full: `redact` gives `sk-…abcd` at most, and `scrub` removes it from any text.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from transformer_min.core.errors import ChannelError, ConfigError
from transformer_min.core.settings import (  # noqa: F401 - resolve_paths is part of the channel's API
    DEFAULT_BASE_URL,
    PROTOCOLS,
    RUNTIME_KEYS,
    check_channel_value,
    read_settings,
    read_text_file,
    resolve_paths,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

log = logging.getLogger(__name__)

DEFAULT_PROTOCOL = "openai"
DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}
DEFAULT_TIMEOUT = 30.0

TOML_KEYS = ("base_url", "api_key", "model", "default_model", "timeout", "protocol")
KEY_ENV_VARS = ("TMIN_API_KEY", "TAOTOKEN_API_KEY")  # first one set wins
ENV_FIELDS = {"TMIN_BASE_URL": "base_url", "TMIN_MODEL": "model", "TMIN_PROTOCOL": "protocol"}
# Names from the other file format, which difflib would not match: settings.json says api_base, config.toml base_url.
_CROSS_NAMES = {"base_url": "api_base", "api_base": "base_url", "default_model": "model"}

# The placeholders the posts print, plus anything that still reads like one ("你的…", "YOUR_…KEY", "<key>").
PLACEHOLDER_KEYS = frozenset({"sk-你的TaoTokenKey", "sk-你的实际key", "YOUR_TAOTOKEN_API_KEY"})
_PLACEHOLDER_RE = re.compile(r"你的|^(sk-)?(your|my)[-_ ]?\w*key$|^<.*>$|^sk-x+$", re.IGNORECASE)
KEY_FIX = (
    "set TAOTOKEN_API_KEY (or TMIN_API_KEY) in the environment, or api_key under [taotoken] in a "
    "git-ignored config.local.toml (or in a git-ignored settings.json)"
)


class ChannelConfigError(ChannelError, ConfigError):
    """A channel setting is invalid; the message names the field, where it came from and the fix.

    It is both a ChannelError (exit code 3) and a ConfigError, so either `except` catches it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MissingKeyError(ChannelConfigError):
    """No usable key: none set, empty, a placeholder from the posts, or kept in a file git tracks."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="api_key")


def redact(key: str | None) -> str:
    """Show at most the first 3 and last 4 characters of a key (`sk-…abcd`); short keys are fully hidden."""
    key = (key or "").strip()
    if not key:
        return "(none)"
    if len(key) < 12:
        return "****"
    return f"{key[:3]}…{key[-4:]}"


def scrub(text: str, key: str | None) -> str:
    """Replace every occurrence of `key` (raw or stripped) in `text` with its redacted form."""
    for variant in {key or "", (key or "").strip()}:
        if len(variant) >= 4:
            text = text.replace(variant, redact(variant))
    return text


@dataclass(frozen=True)
class ChannelSettings:
    """Resolved channel settings. `sources` says where each field came from; repr never shows the key."""

    base_url: str = DEFAULT_BASE_URL
    api_key: str = field(default="", repr=False)
    model: str = DEFAULT_MODELS[DEFAULT_PROTOCOL]
    protocol: str = DEFAULT_PROTOCOL
    timeout: float = DEFAULT_TIMEOUT
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def key_hint(self) -> str:
        """The key as it may be shown: `sk-…abcd`."""
        return redact(self.api_key)


def _unknown_key(name: str, where: str, allowed: tuple[str, ...]) -> ChannelConfigError:
    """Error for an unknown key, suggesting the nearest allowed one (difflib) or a name from the other file."""
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    cross = _CROSS_NAMES.get(name)
    hint = cross if cross in allowed else (close[0] if close else None)
    fix = f"did you mean '{hint}'?" if hint else f"allowed keys: {', '.join(allowed)}"
    return ChannelConfigError(f"{where}: unknown key '{name}'; {fix}", field=name)


def _check_type(name: str, value: Any, where: str) -> Any:
    """Validate one raw value (the settings loader's rules) as a ChannelConfigError naming `where`."""
    return check_channel_value(name, value, where, ChannelConfigError)


def local_config_path(config_path: Path | None) -> Path:
    """The git-ignored companion of a config file, for the key: config.toml -> config.local.toml
    (x.toml -> x.local.toml); ./config.local.toml when no config file is used."""
    if config_path is None:
        return Path("config.local.toml")
    return config_path.with_name(f"{config_path.stem}.local.toml")


def _read_toml(path: Path, local: bool = False) -> dict[str, tuple[Any, str, Path]]:
    """The [taotoken] table of config.toml as {field: (value, source, path)}; other tables are the model's.

    A local file (config.local.toml) holds only [taotoken]; another table there is an error."""
    text = read_text_file(path, "config file", ChannelConfigError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ChannelConfigError(f"{path}: invalid TOML: {exc}; fix the file", field="config") from None
    others = [name for name in data if name != "taotoken"]
    if local and others:
        raise ChannelConfigError(f"{path}: a local file holds only [taotoken] (the key's home), not {others[0]!r}; "
                                 "fix: move it to the main config file", field="config")
    table = data.get("taotoken", {})
    if not isinstance(table, dict):
        raise ChannelConfigError(f"{path}: 'taotoken' must be a table ([taotoken]); fix the file", field="config")
    where = f"{path} [taotoken]"
    for name in table:
        if name not in TOML_KEYS:
            raise _unknown_key(name, where, TOML_KEYS)
    if "model" in table and "default_model" in table and table["model"] != table["default_model"]:
        raise ChannelConfigError(f"{where}: model and default_model disagree; fix: keep only one", field="model")
    out = {}
    for name, value in table.items():
        canonical = "model" if name == "default_model" else name
        out[canonical] = (_check_type(canonical, value, f"{where} {name}"), f"{path} [taotoken] {name}", path)
    return out


def _read_settings_json(path: Path) -> dict[str, tuple[Any, str, Path]]:
    """The channel's part of settings.json as {field: (value, source, path)}, from the one settings loader."""
    part = read_settings(path, {}, error=ChannelConfigError).channel
    return {name: (getattr(part, name), f"{path} {written}", path) for name, written in part.written.items()}


def _read_env(env: Mapping[str, str]) -> dict[str, tuple[Any, str, None]]:
    """Channel fields from the environment; an empty variable counts as unset."""
    out: dict[str, tuple[Any, str, None]] = {}
    for var, name in ENV_FIELDS.items():
        if env.get(var):
            out[name] = (_check_type(name, env[var], f"env {var}"), f"env {var}", None)
    for var in KEY_ENV_VARS:
        if env.get(var):
            out["api_key"] = (env[var], f"env {var}", None)
            break
    return out


def is_git_tracked(path: Path) -> bool:
    """True if git tracks `path` (`git ls-files --error-unmatch`); False when git is absent or it is not tracked."""
    git = shutil.which("git")
    if git is None:
        return False
    path = path.resolve()
    try:
        done = subprocess.run(
            [git, "ls-files", "--error-unmatch", "--", path.name],
            cwd=path.parent, capture_output=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def clean_base_url(url: str, source: str) -> str:
    """Drop query parameters and fragments (the posts' UTM links) with a warning, and any trailing slash."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        log.warning("base_url from %s carried query parameters (e.g. UTM); using %s", source, url.rstrip("/"))
    return url.rstrip("/")


def check_key(key: str, source: str, path: Path | None) -> str:
    """The usable key (surrounding whitespace stripped, with a warning), or MissingKeyError saying why and the fix."""
    stripped = key.strip()
    if stripped != key and stripped:
        log.warning("the key in %s had spaces or a newline around it; stripped them (fix the source)", source)
    if not stripped:
        raise MissingKeyError(f"no key configured: {source} is empty; fix: {KEY_FIX}")
    if stripped in PLACEHOLDER_KEYS or _PLACEHOLDER_RE.search(stripped):
        raise MissingKeyError(
            f"no key configured: {source} is the placeholder {stripped!r} from the posts; "
            f"fix: replace it with your real key, or {KEY_FIX}"
        )
    bad = next((i for i, ch in enumerate(stripped) if not (ch.isascii() and ch.isprintable()) or ch.isspace()), None)
    if bad is not None:  # an HTTP header cannot carry it; never show the key itself
        what = "a space or line break" if stripped[bad].isspace() else "a character that is not printable ASCII"
        raise MissingKeyError(
            f"no key configured: the key in {source} has {what} at position {bad + 1} of {len(stripped)}, which no "
            f"API key has (a paste gone wrong?); fix: copy the key again from your gateway's console"
        )
    if path is not None and is_git_tracked(path):
        raise MissingKeyError(
            f"no key configured: refusing the key in {source} because git tracks {path.name} (it would be "
            "committed); fix: move the key to TAOTOKEN_API_KEY or an untracked, git-ignored file, "
            "and rotate it if it was pushed"
        )
    return stripped


def load_settings(
    config_path: Path | None = None, settings_path: Path | None = None, env: Mapping[str, str] | None = None,
    require_key: bool = True,
) -> ChannelSettings:
    """Merge config.toml [taotoken] < config.local.toml [taotoken] < settings.json < environment over the
    defaults, validate, and check the key.

    Raises ChannelConfigError for a bad file or value and MissingKeyError when no usable key is configured;
    with require_key=False (`tmin doctor`) a missing key gives api_key "" and sources["api_key"] says why.
    """
    env = os.environ if env is None else env
    merged: dict[str, tuple[Any, str, Path | None]] = {}
    if config_path is not None:
        merged.update(_read_toml(Path(config_path)))
    local = local_config_path(Path(config_path) if config_path is not None else None)
    if local.is_file():
        merged.update(_read_toml(local, local=True))
    if settings_path is not None:
        merged.update(_read_settings_json(Path(settings_path)))
    merged.update(_read_env(env))

    protocol = merged.get("protocol", (DEFAULT_PROTOCOL, "default"))[0]
    values = {
        "base_url": merged.get("base_url", (DEFAULT_BASE_URL, "default")),
        "model": merged.get("model", (DEFAULT_MODELS[protocol], "default")),
        "protocol": merged.get("protocol", (DEFAULT_PROTOCOL, "default")),
        "timeout": merged.get("timeout", (DEFAULT_TIMEOUT, "default")),
    }
    sources = {name: entry[1] for name, entry in values.items()}
    try:
        if "api_key" not in merged:
            raise MissingKeyError(f"no key configured; fix: {KEY_FIX}")
        raw_key, key_source, key_path = merged["api_key"]
        key = check_key(raw_key, key_source, key_path)
    except MissingKeyError as e:
        if require_key:
            raise
        key, key_source = "", str(e).split("; fix:")[0]
    sources["api_key"] = key_source
    return ChannelSettings(
        base_url=clean_base_url(values["base_url"][0], sources["base_url"]),
        api_key=key,
        model=values["model"][0],
        protocol=protocol,
        timeout=values["timeout"][0],
        sources=sources,
    )
