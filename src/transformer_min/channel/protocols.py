"""The two wire protocols: URLs, headers and payloads; reading replies; mapping an HTTP status to the setting to fix.

OpenAI:    POST {base_url}/v1/chat/completions, `Authorization: Bearer KEY`, reply in choices[0].message.content.
Anthropic: POST {base_url}/v1/messages, `x-api-key: KEY` + `anthropic-version`, reply in content[*].text.
Models:    GET {base_url}/v1/models with the protocol's headers; data[*].id (Anthropic pages with after_id).
"""

from __future__ import annotations

import email.utils
import json
import re
from datetime import datetime, timezone
from typing import Any

from transformer_min.channel.settings import ChannelSettings, scrub
from transformer_min.core.errors import ChannelError
from transformer_min.core.i18n import tr

ANTHROPIC_VERSION = "2023-06-01"
MODEL_MISSING_RE = re.compile(
    r"model_not_found|no such model"
    r"|model\W[^.]{0,80}?(not found|does not exist|not exist|unknown|not supported|invalid)",
    re.IGNORECASE,
)


class ChannelRequestError(ChannelError):
    """The request failed; `field` names the suspect: api_key, model, base_url, timeout, reply, server, rate_limit."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def endpoint_url(base_url: str, protocol: str, what: str = "chat") -> str:
    """{base_url}/v1/chat/completions or {base_url}/v1/messages (what="chat"), {base_url}/v1/models
    (what="models"); a base_url already ending in /v1 is not doubled."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    if what == "models":
        return base + "/models"
    return base + ("/messages" if protocol == "anthropic" else "/chat/completions")


def auth_headers(settings: ChannelSettings) -> dict[str, str]:
    """The protocol's authentication headers."""
    if settings.protocol == "anthropic":
        return {"x-api-key": settings.api_key, "anthropic-version": ANTHROPIC_VERSION}
    return {"Authorization": f"Bearer {settings.api_key}"}


def build_request(
    settings: ChannelSettings, prompt: str, *, system: str | None = None, max_tokens: int = 512
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(url, headers, JSON payload) for one user message in the configured protocol."""
    url = endpoint_url(settings.base_url, settings.protocol)
    headers = auth_headers(settings)
    if settings.protocol == "anthropic":
        payload: dict[str, Any] = {
            "model": settings.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        }
        if system:
            payload["system"] = system
    else:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        payload = {"model": settings.model, "messages": messages, "max_tokens": max_tokens}
    headers["Content-Type"] = "application/json"
    return url, headers, payload


def excerpt(body: str, key: str | None = None, limit: int = 200) -> str:
    """A one-line, key-free excerpt of a reply body."""
    text = " ".join(body.split())
    text = text if len(text) <= limit else text[:limit] + "…"
    return scrub(text, key) or "(empty body)"


def parse_reply(protocol: str, body: str, *, url: str, key: str | None = None) -> str:
    """The reply text from an OpenAI or Anthropic JSON body; ChannelRequestError quoting the body otherwise."""
    expected = "content" if protocol == "anthropic" else "choices"
    try:
        data = json.loads(body)
        if protocol == "anthropic":
            blocks = data["content"]
            if not isinstance(blocks, list):  # a string or an object is not the protocol's list of blocks
                raise TypeError
            return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        content = data["choices"][0]["message"].get("content")
        if isinstance(content, list):  # some gateways return OpenAI content parts
            return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        if content is not None and not isinstance(content, str):  # 5, {...}: not a message's text
            raise TypeError
        return content or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        if MODEL_MISSING_RE.search(body):
            message = tr("the server does not know the model: {excerpt}; fix: `tmin channel models` lists the "
                         "gateway's models").format(excerpt=excerpt(body, key))
            raise ChannelRequestError(message, field="model") from None
        raise ChannelRequestError(
            tr("the reply from {url} is not {protocol} JSON (no '{expected}'); body starts: {excerpt!r}; fix: check that base_url is the gateway's API root and that protocol matches it").format(url=url, protocol=protocol, expected=expected, excerpt=excerpt(body, key)),
            field="reply",
        ) from None


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds (a number or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def status_error(status: int, body: str, settings: ChannelSettings, url: str, attempts: int) -> ChannelRequestError:
    """Map a non-2xx status to the setting the user should fix."""
    key, src = settings.api_key, settings.sources
    if status in (401, 403):
        return ChannelRequestError(
            tr("the server rejected the key {key_hint} from {get} (HTTP {status}); fix: the key may be expired or revoked, or pasted with spaces or a newline: copy it again").format(key_hint=settings.key_hint, get=src.get('api_key', 'config'), status=status),
            field="api_key",
        )
    if MODEL_MISSING_RE.search(body) and status < 500:
        return ChannelRequestError(
            tr("the server does not know the model '{model}' (HTTP {status}, from {get}); fix: `tmin channel models` lists the gateway's models; set model (settings.json, [taotoken] or TMIN_MODEL) to one of them").format(model=settings.model, status=status, get=src.get('model', 'default')),
            field="model",
        )
    if status == 404:
        return ChannelRequestError(
            tr("HTTP 404 from {url}: no such endpoint or model; fix: check base_url '{base_url}' (the API root, e.g. https://taotoken.net/api), protocol '{protocol}' and model '{model}'").format(url=url, base_url=settings.base_url, protocol=settings.protocol, model=settings.model),
            field="base_url",
        )
    if status == 429:
        return ChannelRequestError(
            tr("rate limited (HTTP 429) after {attempts} attempts; fix: wait a minute, or check your plan's quota").format(attempts=attempts),
            field="rate_limit",
        )
    if status >= 500:
        return ChannelRequestError(
            tr("the gateway failed (HTTP {status}) after {attempts} attempts: {excerpt}; fix: try again later").format(status=status, attempts=attempts, excerpt=excerpt(body, key)),
            field="server",
        )
    if 300 <= status < 400:
        return ChannelRequestError(
            tr("HTTP {status} redirect from {url}; fix: set base_url to the final address (https?)").format(status=status, url=url), field="base_url"
        )
    return ChannelRequestError(
        tr("the server refused the request (HTTP {status}): {excerpt}; fix: check model '{model}' and protocol '{protocol}' against what your gateway accepts (its reply above says why)").format(status=status, excerpt=excerpt(body, key), model=settings.model, protocol=settings.protocol),
        field="request",
    )


def parse_models(body: str, *, url: str, key: str | None = None) -> dict[str, Any]:
    """{"ids", "has_more", "last_id"} from a /v1/models body (OpenAI and Anthropic both list data[*].id)."""
    try:
        data = json.loads(body)
        ids = [m["id"] for m in data["data"]]
        if not all(isinstance(i, str) for i in ids):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ChannelRequestError(
            tr("the reply from {url} is not a model list (no 'data' of ids); body starts: {excerpt!r}; fix: check that base_url is the gateway's API root and that protocol matches it").format(url=url, excerpt=excerpt(body, key)),
            field="reply",
        ) from None
    return {"ids": ids, "has_more": bool(data.get("has_more")), "last_id": data.get("last_id")}
