"""Channel client against the fake gateway: both protocols, retries, error mapping and redaction."""

from __future__ import annotations

import logging

import httpx
import pytest

from transformer_min.channel.client import (
    ChannelClient,
    ChannelRequestError,
    build_request,
    endpoint_url,
    retry_after_seconds,
    transport_error,
)
from transformer_min.channel.settings import ChannelSettings
from transformer_min.core.errors import ChannelError

from .conftest import GOOD_KEY, assert_no_key


def quick_client(settings: ChannelSettings, **kwargs) -> ChannelClient:
    """A client whose backoff sleeps are recorded, not slept."""
    slept: list[float] = []
    client = ChannelClient(settings, backoff_base=0.001, backoff_cap=0.01, sleep=slept.append, **kwargs)
    client.slept = slept
    return client


@pytest.mark.parametrize(
    ("base_url", "protocol", "url"),
    [
        ("https://taotoken.net/api", "openai", "https://taotoken.net/api/v1/chat/completions"),
        ("https://taotoken.net/api/", "openai", "https://taotoken.net/api/v1/chat/completions"),
        ("https://taotoken.net/api/v1", "openai", "https://taotoken.net/api/v1/chat/completions"),
        ("https://taotoken.net/api/v1/", "anthropic", "https://taotoken.net/api/v1/messages"),
        ("https://taotoken.net/api", "anthropic", "https://taotoken.net/api/v1/messages"),
    ],
)
def test_endpoint_url_does_not_double_v1(base_url, protocol, url):
    assert endpoint_url(base_url, protocol) == url


def test_build_request_openai():
    url, headers, payload = build_request(ChannelSettings(api_key=GOOD_KEY), "q?", system="be brief", max_tokens=7)
    assert url == "https://taotoken.net/api/v1/chat/completions"
    assert headers == {"Authorization": f"Bearer {GOOD_KEY}", "Content-Type": "application/json"}
    assert payload == {"model": "gpt-4o-mini", "max_tokens": 7,
                       "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q?"}]}


def test_build_request_anthropic():
    settings = ChannelSettings(api_key=GOOD_KEY, protocol="anthropic", model="claude-x")
    url, headers, payload = build_request(settings, "q?", system="be brief")
    assert url == "https://taotoken.net/api/v1/messages"
    assert headers == {"x-api-key": GOOD_KEY, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    assert payload == {"model": "claude-x", "max_tokens": 512, "system": "be brief",
                       "messages": [{"role": "user", "content": "q?"}]}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_success_both_protocols(gateway, protocol, suffix):
    settings = gateway.settings(protocol=protocol, base_url=gateway.url + suffix)
    reply = quick_client(settings).complete("why sqrt(d_k)?", system="be brief", max_tokens=20)
    assert reply.text == "echo: why sqrt(d_k)?"
    assert reply.attempts == 1 and reply.latency_s > 0 and reply.model == "good"
    (request,) = gateway.requests
    assert request["path"] == ("/v1/messages" if protocol == "anthropic" else "/v1/chat/completions")
    assert request["json"]["max_tokens"] == 20


def test_401_names_the_key_without_showing_it(gateway):
    settings = gateway.settings(api_key="sk-wrong-000000000000dead", sources={"api_key": "env TAOTOKEN_API_KEY"})
    with pytest.raises(ChannelRequestError) as info:
        quick_client(settings).complete("hi")
    message = str(info.value)
    assert info.value.field == "api_key"
    assert "rejected the key sk-…dead from env TAOTOKEN_API_KEY (HTTP 401)" in message
    assert "spaces or a newline" in message
    assert_no_key(message, key="sk-wrong-000000000000dead")
    assert len(gateway.requests) == 1  # 4xx is never retried


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_404_model_not_found_names_the_model(gateway, protocol):
    with pytest.raises(ChannelRequestError) as info:
        quick_client(gateway.settings(model="missing-model", protocol=protocol)).complete("hi")
    assert info.value.field == "model"
    assert "does not know the model 'missing-model' (HTTP 404" in str(info.value)
    assert len(gateway.requests) == 1


def test_plain_404_points_at_base_url(gateway):
    with pytest.raises(ChannelRequestError) as info:
        quick_client(gateway.settings(base_url=gateway.url + "/wrong")).complete("hi")
    assert info.value.field == "base_url"
    assert "/wrong/v1/chat/completions: no such endpoint" in str(info.value)


def test_429_then_success_is_retried(gateway):
    client = quick_client(gateway.settings(model="flaky"))
    reply = client.complete("hi")
    assert reply.attempts == 3 and reply.text == "echo: hi"
    assert client.slept == [0.0, 0.0]  # Retry-After: 0 honoured
    assert len(gateway.requests) == 3


def test_429_forever_gives_up_after_max_attempts(gateway):
    client = quick_client(gateway.settings(model="always-429"), max_attempts=3)
    with pytest.raises(ChannelRequestError, match=r"rate limited \(HTTP 429\) after 3 attempts") as info:
        client.complete("hi")
    assert info.value.field == "rate_limit"
    assert len(gateway.requests) == 3 and len(client.slept) == 2


def test_500_is_retried_with_capped_exponential_backoff(gateway):
    client = ChannelClient(gateway.settings(model="broken"), backoff_base=0.001, backoff_cap=0.003,
                           sleep=lambda s: slept.append(s))
    slept: list[float] = []
    with pytest.raises(ChannelRequestError, match=r"gateway failed \(HTTP 500\) after 4 attempts: upstream") as info:
        client.complete("hi")
    assert info.value.field == "server"
    assert slept == [0.001, 0.002, 0.003]  # 0.001 * 2^k, capped at 0.003
    assert len(gateway.requests) == 4


def test_backoff_honours_retry_after_but_caps_it():
    client = ChannelClient(ChannelSettings(), backoff_base=0.5, backoff_cap=8.0)
    assert client.backoff(1, "2") == 2.0
    assert client.backoff(1, "120") == 8.0
    assert client.backoff(3, None) == 2.0
    assert client.backoff(10, None) == 8.0


def test_retry_after_parsing():
    assert retry_after_seconds("1.5") == 1.5
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past


def test_timeout_names_timeout_and_network(gateway):
    with pytest.raises(ChannelRequestError) as info:
        quick_client(gateway.settings(model="slow", timeout=0.3)).complete("hi")
    assert info.value.field == "timeout"
    assert "within timeout = 0.3 s" in str(info.value) and "network" in str(info.value)


def test_connection_refused_names_base_url_and_proxies(closed_port):
    settings = ChannelSettings(base_url=f"http://127.0.0.1:{closed_port}", api_key=GOOD_KEY, timeout=2)
    with pytest.raises(ChannelRequestError) as info:
        quick_client(settings).complete("hi")
    message = str(info.value)
    assert info.value.field == "base_url"
    assert f"connection refused by 127.0.0.1:{closed_port}" in message
    assert f"check base_url 'http://127.0.0.1:{closed_port}'" in message
    assert "no proxy variables set (HTTPS_PROXY" in message


def test_broken_proxy_is_reported(gateway, closed_port, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(ChannelRequestError) as info:
        quick_client(gateway.settings()).complete("hi")
    assert "proxy variables set: HTTP_PROXY" in str(info.value)
    assert gateway.requests == []


def test_dns_failure_message():
    exc = httpx.ConnectError("[Errno -2] Name or service not known")
    err = transport_error(exc, ChannelSettings(base_url="https://taotken.net/api"), "https://taotken.net/api/v1/x", {})
    assert "cannot resolve host taotken.net (DNS failure" in str(err)
    assert "check base_url 'https://taotken.net/api'" in str(err)


def test_transport_error_text_is_scrubbed():
    exc = httpx.ConnectError(f"weird failure mentioning {GOOD_KEY}")
    err = transport_error(exc, ChannelSettings(api_key=GOOD_KEY), "https://h/v1/x", {})
    assert_no_key(str(err))


@pytest.mark.parametrize(("model", "protocol", "missing"), [
    ("garbage", "openai", "choices"), ("garbage", "anthropic", "content"), ("no-choices", "openai", "choices"),
])
def test_malformed_reply_quotes_the_body(gateway, model, protocol, missing):
    with pytest.raises(ChannelRequestError) as info:
        quick_client(gateway.settings(model=model, protocol=protocol)).complete("hi")
    assert info.value.field == "reply"
    assert f"is not {protocol} JSON (no '{missing}')" in str(info.value)
    assert ("gateway maintenance page" if model == "garbage" else '"object": "chat.completion"') in str(info.value)


def test_missing_httpx_is_a_channel_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_httpx(name, *args, **kwargs):
        if name == "httpx":
            raise ImportError("no httpx")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_httpx)
    with pytest.raises(ChannelError, match=r"pip install 'transformer-min\[channel\]'"):
        ChannelClient(ChannelSettings(api_key=GOOD_KEY)).complete("hi")


@pytest.mark.parametrize("model", ["good", "flaky", "broken", "missing-model", "garbage"])
def test_key_never_in_debug_logs_or_errors(gateway, caplog, model):
    caplog.set_level(logging.DEBUG)  # root: includes httpx and httpcore
    try:
        quick_client(gateway.settings(model=model)).complete("hi")
    except ChannelError as exc:
        assert_no_key(str(exc), repr(exc))
    assert "POST " in caplog.text  # the debug details are there ...
    assert_no_key(caplog.text)  # ... without the key


def _trickle_server(interval: float = 0.5):
    """A 127.0.0.1 server that sends its HTTP reply one byte every `interval` seconds (never done in time)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                body = b'{"choices": [{"message": {"content": "' + b"x" * 200 + b'"}}]}'
                reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
                try:
                    for i in range(len(reply)):
                        if stop.wait(interval if i > 40 else 0):
                            break
                        conn.sendall(reply[i:i + 1])
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], stop, listener


def test_timeout_bounds_the_whole_request_not_the_gap_between_bytes():
    """Issue 13: a reply trickling one byte every 0.5 s used to keep the request alive for ever."""
    import time

    port, stop, listener = _trickle_server(0.5)
    try:
        settings = ChannelSettings(base_url=f"http://127.0.0.1:{port}", api_key=GOOD_KEY, timeout=1.0)
        start = time.monotonic()
        with pytest.raises(ChannelRequestError) as info:
            quick_client(settings).complete("hi")
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        listener.close()
    assert info.value.field == "timeout"
    assert "within timeout = 1 s (it bounds the whole request" in str(info.value)
    assert elapsed < 2.0  # bounded by the timeout (plus scheduling), not by the length of the reply


@pytest.mark.parametrize(("env", "blamed"), [
    ({"NO_PROXY": "example.com"}, None),  # NO_PROXY alone routes nothing
    ({"HTTPS_PROXY": "http://127.0.0.1:9"}, None),  # for https only; the URL is http
    ({"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}, None),  # exempted
    ({"http_proxy": "http://127.0.0.1:9"}, "HTTP_PROXY"),
    ({"ALL_PROXY": "socks5://127.0.0.1:9"}, "ALL_PROXY"),
])
def test_refused_connection_blames_a_proxy_only_when_one_routes_the_request(env, blamed):
    exc = httpx.ConnectError("[Errno 111] Connection refused")
    err = str(transport_error(exc, ChannelSettings(base_url="http://127.0.0.1:5"), "http://127.0.0.1:5/v1/x", env))
    assert "connection refused by 127.0.0.1:5" in err and "check base_url 'http://127.0.0.1:5'" in err
    if blamed:
        assert f"or by the proxy in {blamed}" in err and f"proxy variables set: {blamed}" in err
    else:
        assert "by the proxy" not in err and "proxy variables set" not in err
    if env == {"NO_PROXY": "example.com"}:
        assert "NO_PROXY exempts hosts, it routes nothing" in err
