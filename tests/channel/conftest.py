"""A fake gateway on 127.0.0.1 that speaks both protocols and checks every request it receives.

The model name picks the scenario: "missing-model" (404 model not found), "flaky" (429 twice, then success),
"always-429", "broken" (500), "slow" (answers after the client's timeout), "garbage" (200 with a non-JSON body),
"no-choices" (200 with JSON lacking the protocol's field); anything else succeeds with "echo: <question>".
GET /v1/models lists MODELS in the protocol the headers speak: OpenAI all at once, Anthropic in pages of two
(has_more, last_id, ?after_id=), as the Anthropic models API does.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from transformer_min.channel.settings import ChannelSettings

GOOD_KEY = "sk-test-0123456789abcdefWXYZ"
PATHS = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}
MODELS = ["good", "gpt-4o-mini", "claude-3-5-haiku-latest", "deepseek-chat", "flaky"]
CHANNEL_ENV = ("TMIN_API_KEY", "TAOTOKEN_API_KEY", "TMIN_BASE_URL", "TMIN_MODEL", "TMIN_PROTOCOL", "TMIN_CONFIG")
PROXY_ENV = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


def assert_no_key(*texts: str, key: str = GOOD_KEY) -> None:
    """The key must never appear in full (nor its middle part) in any output."""
    for text in texts:
        assert key not in text
        assert key[3:-4] not in text


class FakeGateway:
    """Records requests as dicts (path, headers, json) and answers by scenario."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.hits: Counter[str] = Counter()
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def settings(self, **overrides) -> ChannelSettings:
        """ChannelSettings pointing at this gateway (base_url without /v1) with the good key."""
        values = {"base_url": self.url, "api_key": GOOD_KEY, "model": "good", "timeout": 5.0}
        return ChannelSettings(**{**values, **overrides})

    def list_models(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict, str]:
        """GET /v1/models: (status, extra headers, body), authenticated by either protocol's headers."""
        path, _, query = handler.path.partition("?")
        self.requests.append({"path": handler.path, "headers": dict(handler.headers), "json": None})
        if path != "/v1/models":
            return 404, {}, "Not Found"
        protocol = "anthropic" if "x-api-key" in handler.headers else "openai"
        if not _authorised(protocol, handler.headers):
            return 401, {}, json.dumps({"error": {"message": "Invalid API key", "type": "authentication_error"}})
        if protocol == "openai":
            return 200, {}, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})
        after = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("after_id")
        start = MODELS.index(after) + 1 if after else 0
        page = MODELS[start:start + 2]
        body = {"data": [{"type": "model", "id": m, "display_name": m} for m in page],
                "has_more": start + 2 < len(MODELS), "first_id": page[0], "last_id": page[-1]}
        return 200, {}, json.dumps(body)

    def answer(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict, str]:
        """(status, extra headers, body) for one request; protocol problems answer 400 with the reason."""
        length = int(handler.headers.get("Content-Length", 0))
        raw = handler.rfile.read(length).decode("utf-8")
        protocol = PATHS.get(handler.path)
        if protocol is None:
            return 404, {}, "Not Found"
        try:
            payload = json.loads(raw)
        except ValueError:
            return 400, {}, json.dumps({"error": {"message": "body is not JSON"}})
        self.requests.append({"path": handler.path, "headers": dict(handler.headers), "json": payload})
        if not _authorised(protocol, handler.headers):
            return 401, {}, json.dumps({"error": {"message": "Invalid API key", "type": "authentication_error"}})
        problem = _payload_problem(protocol, payload)
        if problem:
            return 400, {}, json.dumps({"error": {"message": problem}})
        model = payload["model"]
        self.hits[model] += 1
        if model == "missing-model":
            message = f"The model `{model}` does not exist"
            return 404, {}, json.dumps({"error": {"message": message, "code": "model_not_found"}})
        if model == "flaky" and self.hits[model] <= 2 or model == "always-429":
            return 429, {"Retry-After": "0"}, json.dumps({"error": {"message": "slow down"}})
        if model == "broken":
            return 500, {}, "upstream exploded"
        if model == "slow":
            self.release.wait(3)
        if model == "garbage":
            return 200, {}, "<html><body>gateway maintenance page</body></html>"
        if model == "no-choices":
            return 200, {}, json.dumps({"id": "x", "object": "chat.completion"})
        text = "echo: " + payload["messages"][-1]["content"]
        if protocol == "anthropic":
            body = {"type": "message", "model": model, "content": [{"type": "text", "text": text}]}
        else:
            body = {"object": "chat.completion", "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        return 200, {}, json.dumps(body)


def _authorised(protocol: str, headers) -> bool:
    if protocol == "anthropic":
        return (headers.get("x-api-key") == GOOD_KEY and headers.get("anthropic-version") == "2023-06-01"
                and "Authorization" not in headers)
    return headers.get("Authorization") == f"Bearer {GOOD_KEY}" and "x-api-key" not in headers


def _payload_problem(protocol: str, payload: dict) -> str | None:
    """The reason a payload breaks the protocol, or None."""
    messages = payload.get("messages")
    if not isinstance(payload.get("model"), str) or not isinstance(messages, list) or not messages:
        return "model (string) and messages (non-empty list) are required"
    if any(set(m) != {"role", "content"} or not isinstance(m["content"], str) for m in messages):
        return "each message needs exactly role and content (string)"
    if messages[-1]["role"] != "user":
        return "the last message must come from the user"
    tokens = payload.get("max_tokens")
    if protocol == "anthropic" and not isinstance(tokens, int):
        return "max_tokens (integer) is required"
    if tokens is not None and (not isinstance(tokens, int) or tokens <= 0):
        return "max_tokens must be a positive integer"
    if protocol == "anthropic" and any(m["role"] == "system" for m in messages):
        return "anthropic takes the system prompt as a top-level field"
    return None


def _handler_for(gateway: FakeGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.reply(*gateway.answer(self))

        def do_GET(self) -> None:  # noqa: N802
            self.reply(*gateway.list_models(self))

        def reply(self, status: int, headers: dict, body: str) -> None:
            data = body.encode("utf-8")
            try:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture
def gateway():
    """A FakeGateway serving in a thread for one test."""
    gw = FakeGateway()
    thread = threading.Thread(target=gw.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield gw
    gw.release.set()
    gw.server.shutdown()
    gw.server.server_close()
    thread.join(2)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No channel or proxy variables from the outer shell, and a cwd without config.toml or settings.json."""
    for name in CHANNEL_ENV + PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def closed_port() -> int:
    """A local port with nothing listening (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_settings(directory: Path, **fields) -> Path:
    """Write settings.json with `fields` into `directory`."""
    path = directory / "settings.json"
    path.write_text(json.dumps(fields), encoding="utf-8")
    return path


def write_config(directory: Path, text: str) -> Path:
    """Write config.toml with `text` into `directory`."""
    path = directory / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path
