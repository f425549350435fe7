"""The channel's settings schema: its section of the one config loader, [taotoken] (`SECTION`, handed to
`core.project.load_project(sections=...)` by the commands and by `load_channel`), and `ChannelPart`, its values
as the loader layers them.

The values come, field by field, lowest first, from config.toml [taotoken] < config.local.toml [taotoken] (the
key's git-ignored home) < settings.json (which spells base_url `api_base`) < environment (TMIN_API_KEY, then
TAOTOKEN_API_KEY; TMIN_BASE_URL, TMIN_MODEL, TMIN_PROTOCOL) < --set taotoken.KEY. `check_channel_value` checks
each wherever it comes from, so one value gets one message.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.sections import Section, Setting

NAME = "taotoken"
PROTOCOLS = ("openai", "anthropic")
DEFAULT_BASE_URL = "https://taotoken.net/api"
CHANNEL_FIELDS = ("base_url", "api_key", "model", "protocol", "timeout")


def check_channel_value(name: str, value: Any, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """Validate one channel value (`name` is the field: base_url, api_key, model, timeout, protocol);
    return it normalised. Never puts a key's value into a message."""
    if name == "timeout":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise error(tr("{where}: timeout must be a positive number of seconds, got {value!r}; fix: e.g. timeout = 30"
                           ).format(where=where, value=value))
        return float(value)
    if not isinstance(value, str):
        shown = tr("a non-string value") if name == "api_key" else repr(value)
        raise error(tr("{where}: {name} must be a string, got {shown}; fix: quote it").format(
            where=where, name=name, shown=shown))
    if name == "protocol":
        if value.strip().lower() not in PROTOCOLS:
            raise error(tr("{where}: protocol {value!r} is not one of {protocols}; fix: protocol = \"openai\"").format(
                where=where, value=value, protocols=", ".join(PROTOCOLS)))
        return value.strip().lower()
    if name in ("model", "base_url") and not value.strip():
        raise error(tr("{where}: {name} is empty; fix: remove the line to use the default").format(where=where, name=name))
    if name == "base_url":
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
        except ValueError as e:  # "http://[::1" (an unclosed IPv6 bracket), "http://host:99999"
            raise error(tr("{where}: base_url {value!r} is not a valid URL ({reason}); fix: e.g. {example}").format(
                where=where, value=value, reason=e, example=DEFAULT_BASE_URL)) from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise error(tr("{where}: base_url {value!r} is not an http(s) URL; fix: e.g. {example}").format(
                where=where, value=value, example=DEFAULT_BASE_URL))
        return value.strip()
    return value if name == "api_key" else value.strip()


SECTION = Section(
    name=NAME, fields=CHANNEL_FIELDS, check=check_channel_value, label="the channel",
    aliases={"default_model": "model"},
    settings_keys={"api_base": "base_url", "api_key": "api_key", "model": "model", "protocol": "protocol",
                   "timeout": "timeout"},
    settings_aliases={"base_url": "api_base"},  # the posts write config.toml's spelling in settings.json too
    env=(("TMIN_API_KEY", "api_key"), ("TAOTOKEN_API_KEY", "api_key"), ("TMIN_BASE_URL", "base_url"),
         ("TMIN_MODEL", "model"), ("TMIN_PROTOCOL", "protocol")),
    local_file=True,
)
SECTIONS = (SECTION,)  # what a command hands the loader: `load_project(..., sections=SECTIONS)`


@dataclass(frozen=True)
class ChannelPart:
    """The LLM channel's values, merged field by field over the layers config.toml [taotoken] <
    config.local.toml [taotoken] < settings.json < environment < --set; None = set nowhere."""

    base_url: Setting | None = None
    api_key: Setting | None = None
    model: Setting | None = None
    protocol: Setting | None = None
    timeout: Setting | None = None

    def over(self, layer: Mapping[str, Setting]) -> "ChannelPart":
        """This part with `layer`'s fields on top."""
        return dataclasses.replace(self, **layer)


def channel_part(project: Any) -> ChannelPart:
    """The channel's values of a loaded `core.project.Project` (loaded with `sections=SECTIONS`)."""
    return ChannelPart(**project.section(NAME))
