"""`tmin explore`: a local web page for attention (eq. (1) step by step, a trained model, its training)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_min.cli.argtypes import path_arg
from transformer_min.core.i18n import tr


def port_arg(text: str) -> int:
    """A TCP port 0..65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(tr("expected a port number 0..65535 (0 = any free port), got {text!r}; fix: e.g. --port 8000").format(text=text))
    return value


def add_parsers(sub, parents) -> None:
    p = sub.add_parser("explore", parents=parents, help="a local web page: attention step by step, a model, its run",
                       description="Serve a local page (127.0.0.1 unless --host says otherwise) with eq. (1) step by "
                                   "step, a model's attention per layer and head, and its run's training curves; or "
                                   "write it as one self-contained file with --static.")
    p.add_argument("--checkpoint", metavar="RUN", type=path_arg,
                   help="a run folder (runs/<name>) or checkpoint file; default: random weights (a banner says so)")
    p.add_argument("--port", type=port_arg, default=8000, help="port to listen on (default 8000; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    p.add_argument("--static", metavar="OUT.html", type=path_arg,
                   help="write one self-contained HTML file (no network needed) instead of serving")
    p.set_defaults(func=run_explore)


def check_static_path(path: str) -> Path:
    """The --static output: a file path in a folder that exists or can be made (checked before any work)."""
    from transformer_min.core.errors import ConfigError

    from transformer_min.core.io import check_replaceable, has_marker, page_marker

    p = Path(path)
    if p.is_dir():
        raise ConfigError(tr("--static {path}: is a folder; fix: give a file path such as {p}").format(path=path, p=p / 'explore.html'))
    check_replaceable(p, "--static", tr("an earlier tmin explore page"),
                      has_marker(page_marker("tmin explore"), "<title>tmin explore: attention, step by step</title>"))
    parent = next((a for a in [p.parent, *p.parent.parents] if a.exists()), Path("."))
    if not parent.is_dir():
        raise ConfigError(tr("--static {path}: {parent} is a file, not a folder; fix: choose a path in a folder (e.g. explore.html)").format(path=path, parent=parent))
    import os

    if not os.access(parent, os.W_OK):
        raise ConfigError(tr("--static {path}: the folder {parent} is not writable; fix: choose a writable path").format(path=path, parent=parent))
    return p


def run_explore(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of
    from transformer_min.viz.explore.session import open_session

    out = check_static_path(args.static) if args.static else None
    cfg = project_of(args).config  # config.toml, the environment and --set ([attention] for page 1)
    session = open_session(cfg, args.checkpoint)
    if out is not None:
        from transformer_min.core.errors import ConfigError
        from transformer_min.core.io import atomic_write_text
        from transformer_min.viz.explore.page import render_page, static_data

        try:
            atomic_write_text(out, render_page(static_data(session)))
        except ConfigError as e:
            raise ConfigError(tr("--static {error}").format(error=e)) from None
        print(tr("wrote {out} ({st_size:.1f} MB): open it in a browser, no network needed").format(out=out, st_size=out.stat().st_size / 1000000.0))
        return 0
    return serve(session, args.host, args.port)


def serve(session, host: str, port: int) -> int:
    from transformer_min.viz.explore.server import make_server

    server = make_server(session, host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(tr("warning: --host {host}: the page is reachable from other machines on that network").format(host=host), file=sys.stderr)
    print(tr("tmin explore: serving {url} (Ctrl-C to stop)").format(url=server.url), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print(tr("stopped"), file=sys.stderr)
    finally:
        server.server_close()
    return 0
