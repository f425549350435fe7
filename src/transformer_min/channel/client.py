"""Channel client: one chat request over the OpenAI or Anthropic protocol, with bounded retries and plain-word errors.

OpenAI:    POST {base_url}/v1/chat/completions, `Authorization: Bearer KEY`, reply in choices[0].message.content.
Anthropic: POST {base_url}/v1/messages, `x-api-key: KEY` + `anthropic-version`, reply in content[*].text.
Models:    GET {base_url}/v1/models with the protocol's headers; data[*].id (Anthropic pages with after_id).
The protocols live in `channel.protocols`, the transport (deadline, proxies) in `channel.transport`; httpx is
imported inside `complete`, so the rest of tmin works without the `channel` extra.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from transformer_min.channel.protocols import (  # noqa: F401 - re-exported: the client's API
    ChannelRequestError,
    auth_headers,
    build_request,
    endpoint_url,
    excerpt,
    parse_models,
    parse_reply,
    retry_after_seconds,
    status_error,
)
from transformer_min.channel.settings import ChannelSettings, scrub
from transformer_min.channel.transport import (  # noqa: F401 - re-exported
    proxy_for,
    request_within,
    require_httpx,
    transport_error,
)
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class ChatReply:
    """The model's text, the model name, the last attempt's latency and how many attempts it took."""

    text: str
    model: str
    latency_s: float
    attempts: int


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
                log.info(tr("HTTP %d; retrying in %.2f s (attempt %d of %d)"), response.status_code, wait,
                         attempt + 1, self.max_attempts)
                self.sleep(wait)
                continue
            if not 200 <= response.status_code < 300:
                raise status_error(response.status_code, body, s, url, attempt)
            return response, latency, attempt
        raise AssertionError(tr("unreachable: the last attempt returns or raises"))  # pragma: no cover

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


