"""Channel client: one chat request over the OpenAI or Anthropic protocol, with bounded retries and plain-word errors.

OpenAI:    POST {base_url}/v1/chat/completions, `Authorization: Bearer KEY`, reply in choices[0].message.content.
Anthropic: POST {base_url}/v1/messages, `x-api-key: KEY` + `anthropic-version`, reply in content[*].text.
Models:    GET {base_url}/v1/models with the protocol's headers; data[*].id (Anthropic pages with after_id).
httpx is imported inside `complete`, so the rest of tmin works without the `channel` extra.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from transformer_min.channel.settings import ChannelSettings, scrub
from transformer_min.core.errors import ChannelError

log = logging.getLogger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 512
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")  # NO_PROXY only exempts hosts: it routes nothing
_MODEL_MISSING_RE = re.compile(
    r"model_not_found|no such model"
    r"|model\W[^.]{0,80}?(not found|does not exist|not exist|unknown|not supported|invalid)",
    re.IGNORECASE,
)
_DNS_RE = re.compile(r"name or service|nodename|getaddrinfo|name resolution|no address associated", re.IGNORECASE)


class ChannelRequestError(ChannelError):
    """The request failed; `field` names the suspect: api_key, model, base_url, timeout, reply, server, rate_limit."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ChatReply:
    """The model's text, the model name, the last attempt's latency and how many attempts it took."""

    text: str
    model: str
    latency_s: float
    attempts: int


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
    settings: ChannelSettings, prompt: str, *, system: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS
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
        if _MODEL_MISSING_RE.search(body):
            message = (f"the server does not know the model: {excerpt(body, key)}; fix: `tmin channel models` lists "
                       "the gateway's models")
            raise ChannelRequestError(message, field="model") from None
        raise ChannelRequestError(
            f"the reply from {url} is not {protocol} JSON (no '{expected}'); body starts: {excerpt(body, key)!r}; "
            "fix: check that base_url is the gateway's API root and that protocol matches it",
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
            f"the server rejected the key {settings.key_hint} from {src.get('api_key', 'config')} (HTTP {status}); "
            "fix: the key may be expired or revoked, or pasted with spaces or a newline: copy it again",
            field="api_key",
        )
    if _MODEL_MISSING_RE.search(body) and status < 500:
        return ChannelRequestError(
            f"the server does not know the model '{settings.model}' (HTTP {status}, from "
            f"{src.get('model', 'default')}); fix: `tmin channel models` lists the gateway's models; set model "
            "(settings.json, [taotoken] or TMIN_MODEL) to one of them",
            field="model",
        )
    if status == 404:
        return ChannelRequestError(
            f"HTTP 404 from {url}: no such endpoint or model; fix: check base_url '{settings.base_url}' (the API "
            f"root, e.g. https://taotoken.net/api), protocol '{settings.protocol}' and model '{settings.model}'",
            field="base_url",
        )
    if status == 429:
        return ChannelRequestError(
            f"rate limited (HTTP 429) after {attempts} attempts; fix: wait a minute, or check your plan's quota",
            field="rate_limit",
        )
    if status >= 500:
        return ChannelRequestError(
            f"the gateway failed (HTTP {status}) after {attempts} attempts: {excerpt(body, key)}; fix: try again later",
            field="server",
        )
    if 300 <= status < 400:
        return ChannelRequestError(
            f"HTTP {status} redirect from {url}; fix: set base_url to the final address (https?)", field="base_url"
        )
    return ChannelRequestError(
        f"the server refused the request (HTTP {status}): {excerpt(body, key)}; fix: check model '{settings.model}' "
        f"and protocol '{settings.protocol}' against what your gateway accepts (its reply above says why)",
        field="request",
    )


def _env(env: Mapping[str, str], name: str) -> str:
    return env.get(name) or env.get(name.lower()) or ""


def proxy_for(url: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The proxy variable that routes `url` (HTTPS_PROXY / HTTP_PROXY for its scheme, else ALL_PROXY),
    or None: none is set, or NO_PROXY exempts the host. NO_PROXY alone never routes anything."""
    parts = urlsplit(url)
    candidates = ("HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY", "ALL_PROXY")
    chosen = next((name for name in candidates if _env(env, name)), None)
    if chosen is None:
        return None
    no_proxy = _env(env, "NO_PROXY")
    if no_proxy and urllib.request.proxy_bypass_environment(parts.netloc, {"no": no_proxy}):
        return None
    return chosen


def transport_error(exc: Exception, settings: ChannelSettings, url: str, env=os.environ) -> ChannelRequestError:
    """Map an httpx transport failure (timeout, refused, DNS, proxy) to the settings to check.

    A proxy is blamed only when one routes this URL (`proxy_for`): not for NO_PROXY alone."""
    import httpx

    host = urlsplit(url).netloc
    proxy = proxy_for(url, env)
    others = [name for name in PROXY_VARS if _env(env, name) and name != proxy]
    if proxy:
        proxy_note = f"proxy variables set: {proxy} (it routes this request); check it too"
    elif others or _env(env, "NO_PROXY"):
        proxy_note = "no proxy routes this host (" + ", ".join(
            [*(f"{name} is for other schemes" for name in others),
             *(["NO_PROXY exempts hosts, it routes nothing"] if _env(env, "NO_PROXY") else [])]) + ")"
    else:
        proxy_note = "no proxy variables set (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY); set one if your network needs it"
    reason = scrub(str(exc) or type(exc).__name__, settings.api_key)
    if isinstance(exc, httpx.TimeoutException):
        return ChannelRequestError(
            f"no reply from {host} within timeout = {settings.timeout:g} s (it bounds the whole request: connect, "
            f"send and read the full body; {type(exc).__name__}); fix: raise timeout in settings.json or "
            "[taotoken], or check the network",
            field="timeout",
        )
    broken = isinstance(exc, httpx.DecodingError) or (
        isinstance(exc, httpx.RemoteProtocolError) and "without sending a response" not in reason)
    if broken and not proxy:
        # it connected: the reply itself is broken (cut short, bad gzip, not HTTP)
        return ChannelRequestError(
            f"{host} answered with a broken reply ({reason}); fix: try again later; if it persists, check that "
            f"base_url '{settings.base_url}' is the gateway's API root (not a web page or another service)",
            field="reply",
        )
    if isinstance(exc, httpx.ProxyError):
        what = f"the proxy failed for {host}: {reason}"
    elif isinstance(exc, httpx.ConnectError) and _DNS_RE.search(reason):
        what = f"cannot resolve host {host} (DNS failure: {reason})"
    elif isinstance(exc, httpx.ConnectError) and "refused" in reason.lower():
        what = f"connection refused by {host}" + (f" or by the proxy in {proxy}" if proxy else "")
    else:
        what = f"cannot connect to {host}: {reason}"
    return ChannelRequestError(f"{what}; fix: check base_url '{settings.base_url}'; {proxy_note}", field="base_url")


@dataclass(frozen=True)
class _Reply:
    status_code: int
    headers: Mapping[str, str]
    text: str


def request_within(http, method: str, url: str, headers: dict, payload: Any, timeout: float) -> _Reply:
    """Send and read the whole reply within `timeout` seconds in all, or raise httpx.TimeoutException.

    httpx's own timeouts bound each operation (connect, each read), so a server that sends one byte
    every half second would never time out. The request runs in a worker thread that stops reading at
    the deadline; the caller waits at most `timeout`.
    """
    import httpx

    deadline = time.monotonic() + timeout
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            with http.stream(method, url, headers=headers, json=payload) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the reply's body did not finish before the deadline")
                body = b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")
                done["reply"] = _Reply(response.status_code, response.headers, body)
        except BaseException as exc:  # handed to the caller's thread
            done["error"] = exc

    worker = threading.Thread(target=work, name="tmin-channel-request", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive() or isinstance(done.get("error"), httpx.TimeoutException):
        raise httpx.ReadTimeout(f"the whole request took longer than {timeout:g} s")
    if "error" in done:
        raise done["error"]
    return done["reply"]


class ChannelClient:
    """Send one chat request; retry 429 and 5xx with bounded exponential backoff that honours Retry-After."""

    def __init__(
        self,
        settings: ChannelSettings,
        *,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.max_attempts = max(1, max_attempts)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.sleep = sleep

    def backoff(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt `attempt + 1`: Retry-After if given, else base * 2^(attempt-1); capped."""
        wait = retry_after_seconds(retry_after)
        if wait is None:
            wait = self.backoff_base * 2 ** (attempt - 1)
        return min(wait, self.backoff_cap)

    def _send(self, http, method: str, url: str, headers: dict[str, str], payload: Any = None):
        """One request with retries on 429 and 5xx -> (response, latency of the last attempt, attempts)."""
        import httpx

        s = self.settings
        for attempt in range(1, self.max_attempts + 1):
            start = time.perf_counter()
            try:
                response = request_within(http, method, url, headers, payload, s.timeout)
            except httpx.HTTPError as exc:
                log.debug("transport error: %s", scrub(repr(exc), s.api_key))
                raise transport_error(exc, s, url) from None
            latency = time.perf_counter() - start
            body = response.text
            log.debug("HTTP %d in %.3fs (attempt %d): %s",
                      response.status_code, latency, attempt, excerpt(body, s.api_key))
            retryable = response.status_code == 429 or response.status_code >= 500
            if retryable and attempt < self.max_attempts:
                wait = self.backoff(attempt, response.headers.get("Retry-After"))
                log.info("HTTP %d; retrying in %.2f s (attempt %d of %d)", response.status_code, wait,
                         attempt + 1, self.max_attempts)
                self.sleep(wait)
                continue
            if not 200 <= response.status_code < 300:
                raise status_error(response.status_code, body, s, url, attempt)
            return response, latency, attempt
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def complete(self, prompt: str, *, system: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> ChatReply:
        """Ask the model once (plus retries); return its reply or raise ChannelError naming the setting to fix."""
        httpx = require_httpx()
        s = self.settings
        url, headers, payload = build_request(s, prompt, system=system, max_tokens=max_tokens)
        log.debug("POST %s protocol=%s model=%s key=%s timeout=%gs", url, s.protocol, s.model, s.key_hint, s.timeout)
        with httpx.Client(timeout=s.timeout) as http:
            response, latency, attempts = self._send(http, "POST", url, headers, payload)
        text = parse_reply(s.protocol, response.text, url=url, key=s.api_key)
        return ChatReply(text=text, model=s.model, latency_s=latency, attempts=attempts)

    def list_models(self, max_pages: int = 20) -> list[str]:
        """The model ids the gateway lists: GET {base_url}/v1/models (Anthropic: following has_more/last_id)."""
        httpx = require_httpx()
        s = self.settings
        url = endpoint_url(s.base_url, s.protocol, "models")
        headers = auth_headers(s)
        ids: list[str] = []
        params = ""
        with httpx.Client(timeout=s.timeout) as http:
            for _ in range(max_pages):
                log.debug("GET %s%s protocol=%s key=%s", url, params, s.protocol, s.key_hint)
                response, _, _ = self._send(http, "GET", url + params, headers)
                page = parse_models(response.text, url=url, key=s.api_key)
                ids += page["ids"]
                if not (s.protocol == "anthropic" and page["has_more"] and page["last_id"]):
                    break
                params = f"?after_id={page['last_id']}"
        return ids


def require_httpx():
    try:
        import httpx
    except ImportError:
        raise ChannelError("the LLM channel needs httpx; fix: pip install 'transformer-min[channel]'") from None
    return httpx


def parse_models(body: str, *, url: str, key: str | None = None) -> dict[str, Any]:
    """{"ids", "has_more", "last_id"} from a /v1/models body (OpenAI and Anthropic both list data[*].id)."""
    try:
        data = json.loads(body)
        ids = [m["id"] for m in data["data"]]
        if not all(isinstance(i, str) for i in ids):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ChannelRequestError(
            f"the reply from {url} is not a model list (no 'data' of ids); body starts: {excerpt(body, key)!r}; "
            "fix: check that base_url is the gateway's API root and that protocol matches it",
            field="reply",
        ) from None
    return {"ids": ids, "has_more": bool(data.get("has_more")), "last_id": data.get("last_id")}
