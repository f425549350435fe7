"""Bad inputs (issue 13): LLM-gateway replies, from a server this test starts on 127.0.0.1 and nothing else.

`tmin channel check` / `tmin ask` run in a child process with a settings.json whose api_base points at
one scenario of the server (`http://127.0.0.1:PORT/<scenario>`); each case holds the four rules of
`harness.check_case` and never shows the key in full.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest

from .harness import Case, check_case

KEY = "sk-test-0123456789abcdefWXYZ"
# The child must not inherit a proxy from the outer shell: empty counts as unset (httpx and tmin alike).
NO_PROXIES = {name: "" for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY") for name in (var, var.lower())}
OPENAI_OK = json.dumps({"choices": [{"message": {"role": "assistant", "content": "pong"}}]})

# scenario -> (status, extra headers, body); special scenarios are handled in the handler
REPLIES = {
    "unauthorized": (401, {}, json.dumps({"error": {"message": "Invalid API key"}})),
    "forbidden": (403, {}, json.dumps({"error": {"message": "key revoked"}})),
    "model-missing": (404, {}, json.dumps({"error": {"message": "The model `x` does not exist",
                                                     "code": "model_not_found"}})),
    "no-endpoint": (404, {}, "Not Found"),
    "bad-request": (400, {}, json.dumps({"error": {"message": "max_tokens too large"}})),
    "rate-limited": (429, {"Retry-After": "0"}, json.dumps({"error": {"message": "slow down"}})),
    "server-error": (500, {"Retry-After": "0"}, "upstream exploded"),
    "bad-gateway": (502, {"Retry-After": "0"}, "<html>502 Bad Gateway</html>"),
    "redirect": (302, {"Location": "https://elsewhere.example/"}, ""),
    "html-page": (200, {}, "<html><body>gateway maintenance page</body></html>"),
    "json-without-choices": (200, {}, json.dumps({"id": "x", "object": "chat.completion"})),
    "empty-body": (200, {}, ""),
    "json-array": (200, {}, "[1, 2, 3]"),
    "not-utf8": (200, {}, b"\xff\xfe\x00garbage"),
    "huge-body": (200, {}, b"x" * (9 * 2 ** 20)),  # issue 25: a reply is bounded in size, not only in time
    "echoes-key": (401, {}, json.dumps({"error": {"message": f"key {KEY} is invalid"}})),
}


def raw_reply(status: int, headers: dict, body: str | bytes) -> bytes:
    """A whole HTTP/1.1 response as bytes (so it can also be sent a byte at a time)."""
    data = body if isinstance(body, bytes) else body.encode("utf-8")
    fields = {"Content-Type": "application/json", **headers, "Content-Length": str(len(data)), "Connection": "close"}
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return (head + "\r\n").encode("ascii") + data


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.close_connection = True
        scenario = self.path.strip("/").split("/")[0]
        try:
            if scenario == "hang-up":  # close without a reply
                self.connection.shutdown(socket.SHUT_RDWR)
            elif scenario == "silent":  # no reply within the client's timeout
                time.sleep(3)
            elif scenario == "trickle":  # a whole, valid reply, one byte every 0.5 s
                for byte in raw_reply(200, {}, OPENAI_OK):
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.5)
            else:
                self.wfile.write(raw_reply(*REPLIES.get(scenario, (404, {}, "no such scenario"))))
        except OSError:  # the client gave up (timeout cases)
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    """The gateway on 127.0.0.1 (a free port), for the whole module."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def closed_port() -> int:
    """A local port with nothing listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SETTINGS: dict[str, dict] = {}  # case id -> settings.json fields; "{server}" is the test server's URL


def gateway(scenario: str, command: str = "check", protocol: str = "openai", timeout: float = 5,
            expect: list[str] | None = None) -> Case:
    """A case: settings.json pointing at `scenario` of the test server."""
    args = ["channel", "check"] if command == "check" else ["ask", "What is eq. (1)?"]
    case = Case(id=f"{scenario}-{command}-{protocol}", args=args, expect=expect or [],
                env={**NO_PROXIES, "TAOTOKEN_API_KEY": KEY})
    SETTINGS[case.id] = {"api_base": "{server}/" + scenario, "model": "good", "timeout": timeout,
                         "protocol": protocol}
    return case


CHANNEL_CASES = [
    gateway("unauthorized", expect=["rejected the key", "sk-…WXYZ", "copy it again"]),
    gateway("unauthorized", "ask", "anthropic", expect=["rejected the key", "HTTP 401", "copy it again"]),
    gateway("forbidden", expect=["HTTP 403", "copy it again"]),
    gateway("echoes-key", expect=["HTTP 401", "copy it again"]),
    gateway("model-missing", expect=["does not know the model 'good'", "set model"]),
    gateway("no-endpoint", expect=["HTTP 404", "check base_url"]),
    gateway("bad-request", expect=["HTTP 400", "max_tokens too large", "fix: check model"]),
    gateway("rate-limited", expect=["rate limited (HTTP 429) after 4 attempts", "wait a minute"]),
    gateway("server-error", expect=["HTTP 500", "upstream exploded", "try again later"]),
    gateway("bad-gateway", "ask", expect=["HTTP 502", "try again later"]),
    gateway("redirect", expect=["HTTP 302", "set base_url to the final address"]),
    gateway("html-page", expect=["is not openai JSON (no 'choices')", "maintenance page", "check that base_url"]),
    gateway("html-page", "ask", "anthropic", expect=["is not anthropic JSON (no 'content')", "protocol matches"]),
    gateway("json-without-choices", expect=["no 'choices'", "check that base_url"]),
    gateway("empty-body", expect=["(empty body)", "check that base_url"]),
    gateway("json-array", expect=["no 'choices'", "check that base_url"]),
    gateway("not-utf8", expect=["is not openai JSON", "check that base_url"]),
    gateway("trickle", timeout=1, expect=["within timeout = 1 s", "whole request", "raise timeout"]),
    gateway("silent", timeout=1, expect=["within timeout = 1 s", "raise timeout"]),
    gateway("huge-body", expect=["larger than 8 MB", "check base_url"]),
    gateway("hang-up", expect=["cannot connect to 127.0.0.1", "check base_url"]),
]


@pytest.mark.parametrize("case", CHANNEL_CASES, ids=[c.id for c in CHANNEL_CASES])
def test_bad_gateway_reply(case, tmp_path, server):
    fields = {**SETTINGS[case.id], "api_base": SETTINGS[case.id]["api_base"].format(server=server)}
    (tmp_path / "settings.json").write_text(json.dumps(fields), encoding="utf-8")
    start = time.monotonic()
    proc = check_case(case, tmp_path)
    output = proc.stdout + proc.stderr
    assert KEY not in output and KEY[3:-4] not in output  # never the key in full
    assert time.monotonic() - start < 20  # nothing hangs


@pytest.mark.parametrize("env", [
    {},
    {"NO_PROXY": "example.com,localhost"},  # issue 13: NO_PROXY alone used to be blamed
    {"no_proxy": "*"},
    {"HTTPS_PROXY": "http://127.0.0.1:9"},  # for https; the URL is http
    {"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"},  # the host is exempted
], ids=["none", "NO_PROXY", "no_proxy-star", "HTTPS_PROXY-only", "exempted"])
def test_connection_refused_blames_no_proxy_that_routes_nothing(tmp_path, env):
    port = closed_port()
    (tmp_path / "settings.json").write_text(json.dumps({"api_base": f"http://127.0.0.1:{port}", "timeout": 5}),
                                            encoding="utf-8")
    case = Case(id="refused", args=["channel", "check"], env={**NO_PROXIES, "TAOTOKEN_API_KEY": KEY, **env},
                expect=[f"connection refused by 127.0.0.1:{port}", f"check base_url 'http://127.0.0.1:{port}'"])
    proc = check_case(case, tmp_path)
    assert "by the proxy" not in proc.stderr and "proxy variables set:" not in proc.stderr


def test_enough_cases():
    assert len(CHANNEL_CASES) >= 20
    assert len({c.id for c in CHANNEL_CASES}) == len(CHANNEL_CASES)

