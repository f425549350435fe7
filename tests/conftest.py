"""Shared fixtures for the foundation tests (tests mirror src/transformer_min/)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def single_thread_torch():
    """Run torch on one thread: the tensors here are tiny and the CPUs are shared, and with an
    OpenMP pool on a busy machine each small kernel (a softmax of 15 numbers) waits ~8 ms for its
    threads, which made the suite several times slower. Subprocess tests pass OMP_NUM_THREADS=1."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    """Measurements cached per machine (hardware.attention_kernel) go to a folder of this test
    session, never to the user's ~/.cache; child processes inherit it (subprocess_env keeps it)."""
    import os

    before = os.environ.get("TMIN_CACHE_DIR")
    os.environ["TMIN_CACHE_DIR"] = str(tmp_path_factory.mktemp("tmin_cache"))
    yield
    if before is None:
        os.environ.pop("TMIN_CACHE_DIR", None)
    else:
        os.environ["TMIN_CACHE_DIR"] = before


def subprocess_env() -> dict:
    """Environment for child processes: one torch thread, no TMIN_* from the outer shell
    (except this session's TMIN_CACHE_DIR)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("TMIN_") or k == "TMIN_CACHE_DIR"}
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture
def child_env() -> dict:
    return subprocess_env()


@pytest.fixture
def repo_root() -> Path:
    """The repository root (holds the shipped config.toml and the verify/ scripts)."""
    return REPO_ROOT


@pytest.fixture
def restore_logging():
    """`cli.main` calls logging.basicConfig(force=True): put the root logger back afterwards.

    Handlers the test added (a --log-file FileHandler, a StreamHandler on a captured stderr) are
    closed; the root level and the httpx logger's level are restored.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    httpx_level = logging.getLogger("httpx").level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(httpx_level)


@pytest.fixture
def clean_tmin_env(monkeypatch):
    """No TMIN_CONFIG / TMIN_LOG_LEVEL from the outer shell, and no Chinese locale (output is English unless
    a test asks for --lang zh)."""
    monkeypatch.delenv("TMIN_CONFIG", raising=False)
    monkeypatch.delenv("TMIN_LOG_LEVEL", raising=False)
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_keys_remembered_after_each_test():
    """Keys a test configured (core.secrets remembers them for the whole process) are forgotten after it: with
    one process running several test files, a short key of one file ("sk-a" in test_config.py) was scrubbed
    by value out of another file's text, and its assertion on the redaction of unknown keys failed."""
    yield
    from transformer_min.core import secrets

    secrets.forget_all()


@pytest.fixture(autouse=True)
def english_after_each_test():
    """`--lang zh` switches the process-wide catalog: put English back for the next test."""
    yield
    from transformer_min.core.i18n import set_language

    set_language("en")
