"""Fixtures for tmin explore: a tiny reverse-task run trained here, a tiny translation run, random-weight
sessions, a server on 127.0.0.1 (port 0) in a thread, and headless Chromium (skipped when absent)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from transformer_min.core.config import config_from_dict

REVERSE_TOML = """
[model]
d_model = 32
num_heads = 4
d_ff = 64
num_layers = 2
dropout = 0.1
max_len = 64

[vocab]
src_size = 11
tgt_size = 11

[train]
task = "reverse"
steps = 1000
batch_tokens = 1024
warmup_steps = 100
lr_factor = 1.0
label_smoothing = 0.1
eval_interval = 1000
checkpoint_interval = 1000
seed = 1234
device = "cpu"
num_threads = 1
out_dir = "{out}"
name = "reverse"
"""

# The [model] and [attention] sizes of the random-weight sessions: small, so a test draws every map quickly.
SMALL = {"model": {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "max_len": 64},
         "attention": {"d_model": 64, "num_heads": 4, "seq_len": 6, "seed": 42}}


@pytest.fixture(scope="session")
def reverse_run(tmp_path_factory) -> Path:
    """A reverse-task model trained here: d_model 32, 2 layers, 1,000 steps (about a minute of one core). At 300
    steps the last layer's cross-attention was anti-diagonal in every row for only 23-30 of 42 random sentences
    (one row off by one in the rest, the reversal itself right), so the page's alignment test passed or failed with
    the CPU's arithmetic (it failed on an AVX2-only AMD EPYC); at 1,000 steps 42 of 42, on AVX-512 and with torch
    and oneDNN held to AVX2."""
    from transformer_min.core.project import load_project
    from transformer_min.cli.train import train

    root = tmp_path_factory.mktemp("reverse")
    (root / "reverse.toml").write_text(REVERSE_TOML.format(out=(root / "runs").as_posix()), encoding="utf-8")
    result, run_dir = train(load_project(root / "reverse.toml", quiet=True).config)
    assert result.step == 1000
    return run_dir


@pytest.fixture(scope="session")
def reverse_session(reverse_run):
    from transformer_min.viz.explore.session import open_session

    return open_session(config_from_dict(SMALL), str(reverse_run))


@pytest.fixture(scope="session")
def random_session():
    from transformer_min.viz.explore.session import open_session

    return open_session(config_from_dict(SMALL))


@pytest.fixture(scope="session")
def translation_run(tmp_path_factory) -> Path:
    """A translation run of 2 steps on word-by-word data (its spm.model and val/test files beside it)."""
    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.config import Config, DataConfig, ModelConfig, TrainConfig, VocabConfig
    from transformer_min.cli.train import train

    root = tmp_path_factory.mktemp("mt")
    data = root / "multi30k"
    write_split(data, "train", make_pairs(120, 1))
    write_split(data, "val", make_pairs(10, 2), gz=False)
    write_split(data, "test_2016_flickr", make_pairs(10, 3))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60), data=DataConfig(data_dir=str(data), vocab_size=60),
                 train=TrainConfig(task="translation", steps=2, batch_tokens=400, warmup_steps=30,
                                   eval_interval=1000, checkpoint_interval=2, out_dir=str(root / "runs"),
                                   name="mt", seed=3, device="cpu"))
    return train(cfg, num_threads=1)[1]


@pytest.fixture
def serve():
    """start(session) -> the URL of a server on 127.0.0.1, port 0, answering from a thread."""
    from transformer_min.viz.explore.server import make_server

    servers = []

    def start(session) -> str:
        server = make_server(session, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def chromium_paths() -> tuple[str | None, str | None]:
    names = ("chromium", "chromium-browser", "google-chrome")
    browser = next((shutil.which(n) for n in names if shutil.which(n)), None)
    return browser, shutil.which("chromedriver")


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium driven by selenium (Debian's chromium and chromium-driver); skipped when absent."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    binary, driver = chromium_paths()
    if binary is None or driver is None:
        pytest.skip("headless browser tests need chromium and chromedriver "
                    "(apt-get install -y chromium chromium-driver; .ci/run installs them)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_script_timeout(60)
    yield chrome
    chrome.quit()


@pytest.fixture
def artifact_dir(tmp_path) -> Path:
    """Where screenshots go: $TMIN_TEST_ARTIFACTS when set (CI keeps it), else the test's tmp folder."""
    out = Path(os.environ.get("TMIN_TEST_ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out
