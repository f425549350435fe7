"""Channel settings: the channel's typed part of the one config loader, resolved to `ChannelSettings`; the key
checked; redaction.

The loader (`transformer_min.core.project.load_project`) reads config.toml [taotoken], config.local.toml,
settings.json, the environment and --set once and hands the channel a `ChannelPart`: each field with where it
came from. Precedence, field by field: --set > environment > settings.json > config.local.toml > config.toml >
defaults. config.local.toml (git-ignored) is the place for a key kept in a file.
A key is never shown in full: `redact` (core.secrets, the one redaction point) gives `sk-…abcd` at most.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit, urlunsplit

from transformer_min.core.errors import ChannelError, ConfigError
from transformer_min.channel.schema import (  # noqa: F401 - PROTOCOLS: re-exported
    DEFAULT_BASE_URL,
    PROTOCOLS,
    SECTIONS,
    ChannelPart,
    channel_part,
)
from transformer_min.core.project import load_project, local_config_path  # noqa: F401 - part of the channel's API
from transformer_min.core.settings import resolve_paths  # noqa: F401 - resolve_paths: the channel's API
from transformer_min.core.secrets import PLACEHOLDER_RE, redact, scrub  # noqa: F401 - the one redaction point, re-exported
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)

DEFAULT_PROTOCOL = "openai"
DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}
DEFAULT_TIMEOUT = 30.0

# The placeholders the posts print, plus anything that still reads like one ("你的…", "YOUR_…KEY", "<key>").
PLACEHOLDER_KEYS = frozenset({"sk-你的TaoTokenKey", "sk-你的实际key", "YOUR_TAOTOKEN_API_KEY"})
_PLACEHOLDER_RE = PLACEHOLDER_RE
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

    def __init__(self, message: str, none_set: bool = False) -> None:
        super().__init__(message, field="api_key")
        self.none_set = none_set  # no key anywhere (not a bad one): `tmin verify --llm` says how to set one


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
        log.warning(tr("base_url from %s carried query parameters (e.g. UTM); using %s"), source, url.rstrip("/"))
    return url.rstrip("/")


def check_key(key: str, source: str, path: Path | None) -> str:
    """The usable key (surrounding whitespace stripped, with a warning), or MissingKeyError saying why and the fix."""
    stripped = key.strip()
    if stripped != key and stripped:
        log.warning(tr("the key in %s had spaces or a newline around it; stripped them (fix the source)"), source)
    if not stripped:
        raise MissingKeyError(tr("no key configured: {source} is empty; fix: {KEY_FIX}").format(source=source, KEY_FIX=tr(KEY_FIX)))
    if stripped in PLACEHOLDER_KEYS or _PLACEHOLDER_RE.search(stripped):
        raise MissingKeyError(
            tr("no key configured: {source} is the placeholder {stripped!r} from the posts; fix: replace it with your real key, or {KEY_FIX}").format(source=source, stripped=stripped, KEY_FIX=tr(KEY_FIX))
        )
    bad = next((i for i, ch in enumerate(stripped) if not (ch.isascii() and ch.isprintable()) or ch.isspace()), None)
    if bad is not None:  # an HTTP header cannot carry it; never show the key itself
        what = tr("a space or line break") if stripped[bad].isspace() else tr("a character that is not printable ASCII")
        raise MissingKeyError(
            tr("no key configured: the key in {source} has {what} at position {bad} of {n_stripped}, which no API key has (a paste gone wrong?); fix: copy the key again from your gateway's console").format(source=source, what=what, bad=bad + 1, n_stripped=len(stripped))
        )
    if path is not None and is_git_tracked(path):
        raise MissingKeyError(
            tr("no key configured: refusing the key in {source} because git tracks {name} (it would be committed); fix: move the key to TAOTOKEN_API_KEY or an untracked, git-ignored file, and rotate it if it was pushed").format(source=source, name=path.name)
        )
    return stripped


def channel_key(part: ChannelPart, require_key: bool) -> tuple[str, str]:
    """(the usable key, its source); with require_key=False a missing key gives ("", why) instead of raising."""
    try:
        if part.api_key is None:
            raise MissingKeyError(tr("no key configured; fix: {KEY_FIX}").format(KEY_FIX=tr(KEY_FIX)), none_set=True)
        return check_key(part.api_key.value, part.api_key.source, part.api_key.path), part.api_key.source
    except MissingKeyError as e:
        if require_key:
            raise
        return "", re.split(r"; fix:|；修复：", str(e))[0]  # the reason, in either language


def resolve_channel(part: ChannelPart, require_key: bool = True) -> ChannelSettings:
    """The loader's `ChannelPart` over the defaults, with the key checked.

    Raises MissingKeyError when no usable key is configured; with require_key=False (`tmin doctor`) a missing
    key gives api_key "" and sources["api_key"] says why.
    """
    protocol = part.protocol.value if part.protocol else DEFAULT_PROTOCOL
    defaults = {"base_url": DEFAULT_BASE_URL, "model": DEFAULT_MODELS[protocol], "protocol": DEFAULT_PROTOCOL,
                "timeout": DEFAULT_TIMEOUT}
    values = {name: getattr(part, name).value if getattr(part, name) else default for name, default in defaults.items()}
    sources = {name: getattr(part, name).source if getattr(part, name) else "default" for name in defaults}
    key, sources["api_key"] = channel_key(part, require_key)
    return ChannelSettings(base_url=clean_base_url(values["base_url"], sources["base_url"]), api_key=key,
                           model=values["model"], protocol=protocol, timeout=values["timeout"], sources=sources)


def load_channel(
    config_path: Path | None = None, settings_path: Path | None = None, env: Mapping[str, str] | None = None,
    require_key: bool = True,
) -> ChannelSettings:
    """The channel's settings on their own (a library caller without a loaded project): the one loader reads the
    files and the environment, and a problem there is a ChannelConfigError (exit code 3)."""
    env = os.environ if env is None else env
    try:
        part = channel_part(load_project(config_path, settings_path, env, quiet=True, sections=SECTIONS))
    except ChannelError:
        raise
    except ConfigError as e:
        raise ChannelConfigError(str(e)) from None
    return resolve_channel(part, require_key)
