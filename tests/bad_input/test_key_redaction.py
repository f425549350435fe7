"""A configured key is never shown in full (issue 25): one marker key through every source (the environment,
settings.json, config.toml, config.local.toml, --set) and every cheap command; stdout, stderr, the log file,
a run folder, `doctor --json` and the error line are searched for it.

The marker does not look like an `sk-` key, so what stops it is the remembered key (core.secrets), not the
pattern that catches any `sk-...` token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.harness import TRACEBACK_MARKERS, run_tmin

MARKER = "tmk-Marker-0123456789-ABCDEFGH"
FRAGMENT = MARKER[3:-4]  # what redact() never shows: everything but the first 3 and the last 4 characters
CLOSED = "http://127.0.0.1:9"  # discard port: the connection is refused at once, nothing leaves the machine
NO_PROXIES = {name: "" for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY") for name in (var, var.lower())}


def env_source(var: str):
    return lambda tmp: ({var: MARKER}, [])


def settings_source(tmp: Path):
    (tmp / "settings.json").write_text(json.dumps({"api_key": MARKER, "api_base": CLOSED}))
    return {}, []


def config_source(tmp: Path):
    (tmp / "config.toml").write_text(f'[taotoken]\napi_key = "{MARKER}"\nbase_url = "{CLOSED}"\n')
    return {}, []


def local_source(tmp: Path):
    (tmp / "config.local.toml").write_text(f'[taotoken]\napi_key = "{MARKER}"\n')
    return {}, []


def set_source(tmp: Path):
    return {}, ["--set", f"taotoken.api_key={MARKER}"]


SOURCES = {"env-TAOTOKEN_API_KEY": env_source("TAOTOKEN_API_KEY"), "env-TMIN_API_KEY": env_source("TMIN_API_KEY"),
           "settings.json": settings_source, "config.toml": config_source, "config.local.toml": local_source,
           "--set": set_source}
COMMANDS = {
    "channel-check-debug-log": ["--log-level", "DEBUG", "--log-file", "tmin.log", "channel", "check"],
    "doctor-json": ["doctor", "--json", "--probe-seconds", "0.5"],
    "config-error": ["--set", "taotoken.timeout=soon", "channel", "check"],
    "channel-ask": ["channel", "ask", "why sqrt(d_k)?"],
}


def everything_written(tmp: Path, proc) -> str:
    files = "".join(p.read_text(errors="replace") for p in tmp.rglob("*")
                    if p.is_file() and p.name not in ("settings.json", "config.toml", "config.local.toml"))
    return proc.stdout + proc.stderr + files


@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
@pytest.mark.parametrize("source", SOURCES, ids=list(SOURCES))
def test_marker_key_never_shown(source, command, tmp_path):
    env, args = SOURCES[source](tmp_path)
    base = [] if source in ("settings.json", "config.toml") else ["--set", f"taotoken.base_url={CLOSED}"]
    proc = run_tmin([*args, *base, *COMMANDS[command]], tmp_path, env={**NO_PROXIES, **env}, timeout=60)
    seen = everything_written(tmp_path, proc)
    assert FRAGMENT not in seen, f"{source} / {command}: the key is shown:\n{seen[-2000:]}"
    assert not any(m in proc.stderr for m in TRACEBACK_MARKERS), proc.stderr[-2000:]
    if command == "doctor-json":
        doc = json.loads(proc.stdout)
        assert "…" in json.dumps(doc, ensure_ascii=False) or "key" in proc.stdout


def test_train_run_folder_holds_no_key(tmp_path):
    """A run copies its config (config.toml, the checkpoints' embedded config): the [taotoken] table is not in it."""
    from tests.training.test_distributed import TINY_TOML

    (tmp_path / "config.toml").write_text(TINY_TOML + f'steps = 1\nout_dir = "runs"\nname = "r"\n\n[taotoken]\n'
                                          f'api_key = "{MARKER}"\n')
    proc = run_tmin(["--log-file", "train.log", "train"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "runs" / "r").is_dir()
    blobs = [p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert not any(FRAGMENT.encode() in b for b in blobs)
    assert FRAGMENT not in everything_written(tmp_path, proc)


@pytest.mark.usefixtures("restore_logging", "clean_tmin_env")  # cli.main configures the root logger
def test_in_process_main_scrubs_and_restores_streams(capsys, monkeypatch, tmp_path):
    """cli.main run in-process: the key printed by a command is scrubbed, and sys.stdout is given back."""
    import sys

    from transformer_min.cli.main import main
    from transformer_min.core import secrets

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TAOTOKEN_API_KEY", MARKER)
    before = sys.stdout
    main(["--set", f"taotoken.base_url={CLOSED}", "doctor", "--probe-seconds", "0.5"])
    assert sys.stdout is before
    out = capsys.readouterr()
    assert FRAGMENT not in out.out + out.err
    assert secrets.scrub_known(f"echo {MARKER}!") == f"echo {secrets.redact(MARKER)}!"


@pytest.mark.parametrize("text", ["Bearer sk-abcdefghijklmnop1234", "key=sk-proj-AAAABBBBCCCCDDDD9999 end"])
def test_any_sk_key_is_cut_even_unconfigured(text):
    from transformer_min.core.secrets import scrub_known

    assert "…" in scrub_known(text) and "abcdefghijkl" not in scrub_known(text) and "BBBBCCCC" not in scrub_known(text)


def test_placeholders_are_not_redacted():
    """The posts' placeholders are named in messages as they are (they are no secret)."""
    from transformer_min.core.secrets import remember, scrub_known

    remember("YOUR_TAOTOKEN_API_KEY", "sk-xxxxxxxxxxxxxxxx")
    assert scrub_known("'YOUR_TAOTOKEN_API_KEY' or 'sk-xxxxxxxxxxxxxxxx'") == \
        "'YOUR_TAOTOKEN_API_KEY' or 'sk-xxxxxxxxxxxxxxxx'"
