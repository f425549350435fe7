"""Shared by the plain scripts in verify/: run some stages through the library and exit with its code."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works without `pip install -e .`


def run(*stages: str) -> int:
    from transformer_min.cli.main import main

    return main(["verify", *stages, *sys.argv[1:]])
