"""The local server of `tmin explore`: the page at /, JSON at /api/... (standard library http.server).

Bad input (an empty or unknown sentence, a toggle out of range) is a 400 with {"error": message}; the page
shows the message. Nothing answers with a traceback: an unexpected failure is a 500 with one line.
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from transformer_min.core.errors import ConfigError, TminError
from transformer_min.core.i18n import tr
from transformer_min.viz.explore.curves import curves
from transformer_min.viz.explore.equation import demo_equation, head_choices, seq_len_choices
from transformer_min.viz.explore.page import page_data, render_page
from transformer_min.viz.explore.sentence import KINDS, model_equation, translate
from transformer_min.viz.explore.session import Session
from transformer_min.viz.explore.tensors import choice_param, flag_param, int_param

log = logging.getLogger(__name__)


def sentence_param(query: dict) -> str:
    return query.get("sentence", [""])[-1]


def api_equation(s: Session, q: dict) -> dict:
    """Eq. (1) at the page's toggles: source=demo (seq_len, heads) or source=model (sentence, kind, layer)."""
    scale, causal = flag_param(q, "scale", True), flag_param(q, "causal", False)
    if choice_param(q, "source", "demo", ("demo", "model")) == "demo":
        seq_len = int_param(q, "seq_len", s.demo.seq_len, seq_len_choices(s.demo))
        heads = int_param(q, "heads", min(s.demo.num_heads, max(head_choices(s.demo.d_model))),
                          head_choices(s.demo.d_model))
        return demo_equation(s.demo, seq_len, heads, scale, causal)
    kind = choice_param(q, "kind", "encoder", KINDS)
    layer = int_param(q, "layer", 0, None, 0, s.cfg.model.num_layers - 1)
    return model_equation(s, sentence_param(q), kind, layer, scale, causal)


ROUTES: dict[str, Callable[[Session, dict], dict]] = {
    "/api/info": lambda s, q: page_data(s, "server"),
    "/api/equation": api_equation,
    "/api/translate": lambda s, q: translate(s, sentence_param(q)),
    "/api/curves": lambda s, q: curves(s.cfg, s.run_dir),
}


class ExploreServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer holding the session and the rendered page."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], session: Session):
        super().__init__(address, ExploreHandler)
        self.session = session
        self.page = render_page(page_data(session, "server")).encode("utf-8")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


class ExploreHandler(BaseHTTPRequestHandler):
    server: ExploreServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            return self._send(200, "text/html; charset=utf-8", self.server.page)
        route = ROUTES.get(url.path)
        if route is None:
            return self._json(404, {"error": tr("no such page {path}; the page is at /, the data at {routes}").format(
                path=url.path, routes=", ".join(ROUTES))})
        try:
            body = route(self.server.session, parse_qs(url.query, keep_blank_values=True))
        except (TminError, ValueError) as e:
            return self._json(400, {"error": str(e)})
        except Exception as e:  # noqa: BLE001 - a bug: one line for the page, the trace in the debug log
            log.debug("%s failed", self.path, exc_info=True)
            return self._json(500, {"error": tr("internal error ({kind}: {error}); see tmin explore's log").format(
                kind=type(e).__name__, error=e)})
        return self._json(200, body)

    def _json(self, status: int, body: dict) -> None:
        self._send(status, "application/json", json.dumps(body, allow_nan=False).encode("utf-8"))

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s " + format, self.address_string(), *args)


def make_server(session: Session, host: str = "127.0.0.1", port: int = 8000) -> ExploreServer:
    """Bind the server (port 0: any free port); a port in use or a bad host is a ConfigError naming it."""
    try:
        return ExploreServer((host, port), session)
    except OSError as e:
        raise ConfigError(tr("--host {host} --port {port}: cannot listen there ({value}); fix: choose another --port (0 picks a free one) or a --host of this machine (127.0.0.1)").format(host=host, port=port, value=e.strerror or e)) from None
