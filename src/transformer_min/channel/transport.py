"""Getting one request through: the whole-request deadline, proxies, and transport failures in plain words.

httpx is imported inside the functions, so the rest of tmin works without the `channel` extra.
"""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from transformer_min.channel.protocols import ChannelRequestError
from transformer_min.channel.settings import ChannelSettings, scrub
from transformer_min.core.errors import ChannelError
from transformer_min.core.i18n import tr

MAX_REPLY_BYTES = 8 * 2 ** 20  # a chat reply is kilobytes: more is not the gateway's API (a download, a stream)
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")  # NO_PROXY only exempts hosts: it routes nothing
_DNS_RE = re.compile(r"name or service|nodename|getaddrinfo|name resolution|no address associated", re.IGNORECASE)


def env_value(env: Mapping[str, str], name: str) -> str:
    return env.get(name) or env.get(name.lower()) or ""


def proxy_for(url: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The proxy variable that routes `url` (HTTPS_PROXY / HTTP_PROXY for its scheme, else ALL_PROXY),
    or None: none is set, or NO_PROXY exempts the host. NO_PROXY alone never routes anything."""
    parts = urlsplit(url)
    candidates = ("HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY", "ALL_PROXY")
    chosen = next((name for name in candidates if env_value(env, name)), None)
    if chosen is None:
        return None
    no_proxy = env_value(env, "NO_PROXY")
    if no_proxy and urllib.request.proxy_bypass_environment(parts.netloc, {"no": no_proxy}):
        return None
    return chosen


def transport_error(exc: Exception, settings: ChannelSettings, url: str, env=os.environ) -> ChannelRequestError:
    """Map an httpx transport failure (timeout, refused, DNS, proxy) to the settings to check.

    A proxy is blamed only when one routes this URL (`proxy_for`): not for NO_PROXY alone."""
    import httpx

    host = urlsplit(url).netloc
    proxy = proxy_for(url, env)
    others = [name for name in PROXY_VARS if env_value(env, name) and name != proxy]
    if proxy:
        proxy_note = tr("proxy variables set: {proxy} (it routes this request); check it too").format(proxy=proxy)
    elif others or env_value(env, "NO_PROXY"):
        proxy_note = tr("no proxy routes this host ({why})").format(why=", ".join(
            [*(tr("{name} is for other schemes").format(name=name) for name in others),
             *([tr("NO_PROXY exempts hosts, it routes nothing")] if env_value(env, "NO_PROXY") else [])]))
    else:
        proxy_note = tr("no proxy variables set (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY); set one if your network needs it")
    reason = scrub(str(exc) or type(exc).__name__, settings.api_key)
    if isinstance(exc, httpx.TimeoutException):
        return ChannelRequestError(
            tr("no reply from {host} within timeout = {timeout:g} s (it bounds the whole request: connect, send and read the full body; {name}); fix: raise timeout in settings.json or [taotoken], or check the network").format(host=host, timeout=settings.timeout, name=type(exc).__name__),
            field="timeout",
        )
    broken = isinstance(exc, httpx.DecodingError) or (
        isinstance(exc, httpx.RemoteProtocolError) and "without sending a response" not in reason)
    if broken and not proxy:
        # it connected: the reply itself is broken (cut short, bad gzip, not HTTP)
        return ChannelRequestError(
            tr("{host} answered with a broken reply ({reason}); fix: try again later; if it persists, check that base_url '{base_url}' is the gateway's API root (not a web page or another service)").format(host=host, reason=reason, base_url=settings.base_url),
            field="reply",
        )
    if isinstance(exc, httpx.ProxyError):
        what = tr("the proxy failed for {host}: {reason}").format(host=host, reason=reason)
    elif isinstance(exc, httpx.ConnectError) and _DNS_RE.search(reason):
        what = tr("cannot resolve host {host} (DNS failure: {reason})").format(host=host, reason=reason)
    elif isinstance(exc, httpx.ConnectError) and "refused" in reason.lower():
        what = tr("connection refused by {host}").format(host=host) + (
            tr(" or by the proxy in {proxy}").format(proxy=proxy) if proxy else "")
    else:
        what = tr("cannot connect to {host}: {reason}").format(host=host, reason=reason)
    return ChannelRequestError(tr("{what}; fix: check base_url '{base_url}'; {proxy_note}").format(what=what, base_url=settings.base_url, proxy_note=proxy_note), field="base_url")


@dataclass(frozen=True)
class Reply:
    status_code: int
    headers: Mapping[str, str]
    text: str


def request_within(http, method: str, url: str, headers: dict, payload: Any, timeout: float) -> Reply:
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
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_REPLY_BYTES:
                        raise ChannelError(tr("the reply from {url} is larger than {mb} MB, which no chat reply is; "
                                              "fix: check base_url (it should be the gateway's API)").format(
                                                  url=url, mb=MAX_REPLY_BYTES // 2 ** 20))
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the reply's body did not finish before the deadline")
                body = b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")
                done["reply"] = Reply(response.status_code, response.headers, body)
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


def require_httpx():
    try:
        import httpx
    except ImportError:
        raise ChannelError(tr("the LLM channel needs httpx; fix: pip install 'transformer-min[channel]'")) from None
    return httpx
