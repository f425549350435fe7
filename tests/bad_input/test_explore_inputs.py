"""Bad input to `tmin explore` (issue 16), held to the harness's four rules: no traceback, a non-zero exit, a
message naming the thing and the fix, nothing that existed changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case


def a_file(name: str, text: str = "x\n"):
    def setup(tmp: Path) -> None:
        (tmp / name).write_text(text, encoding="utf-8")
    return setup


def a_folder(name: str):
    def setup(tmp: Path) -> None:
        (tmp / name).mkdir()
        (tmp / name / "keep.txt").write_text("kept\n", encoding="utf-8")
    return setup


SMALL_CONFIG = "[model]\nd_model = 32\nnum_heads = 4\nd_ff = 64\nnum_layers = 1\n"

CASES = [
    Case("port-too-large", expect=["--port", "0..65535", "--port 8000"], args=["explore", "--port", "70000"]),
    Case("port-negative", expect=["--port", "0..65535"], args=["explore", "--port", "-1"]),
    Case("port-not-a-number", expect=["--port", "'http'", "0..65535"], args=["explore", "--port", "http"]),
    Case("host-not-an-address", expect=["--host 999.0.0.1", "cannot listen there", "127.0.0.1"],
         args=["explore", "--host", "999.0.0.1", "--port", "0"], setup=a_file("config.toml", SMALL_CONFIG)),
    Case("checkpoint-missing", expect=["--checkpoint runs/nothing", "no such file or run directory", "runs/<name>"],
         args=["explore", "--checkpoint", "runs/nothing"]),
    Case("checkpoint-empty", expect=["--checkpoint", "expected a path"], args=["explore", "--checkpoint", ""]),
    Case("checkpoint-not-a-checkpoint", expect=["notes.txt"], args=["explore", "--checkpoint", "notes.txt"],
         setup=a_file("notes.txt", "not a checkpoint\n")),
    Case("checkpoint-folder-without-a-run", expect=["empty", "no checkpoint found", "tmin train"],
         args=["explore", "--checkpoint", "empty"], setup=a_folder("empty")),
    Case("static-is-a-folder", expect=["--static out", "is a folder", "out/explore.html"],
         args=["explore", "--static", "out"], setup=a_folder("out")),
    Case("static-under-a-file", expect=["--static notes.txt/explore.html", "is a file, not a folder", "choose a path"],
         args=["explore", "--static", "notes.txt/explore.html"], setup=a_file("notes.txt")),
    Case("static-empty", expect=["--static", "expected a path"], args=["explore", "--static", ""]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_explore_bad_input(case, tmp_path):
    check_case(case, tmp_path)
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob(".*.tmp"))
