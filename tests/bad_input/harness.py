"""The bad-input harness (issue 13): run `tmin` as a user would and hold the answer to the rules.

Every case of the corpus asserts four things:
- no traceback (nothing of Python's error report reaches the user);
- a non-zero exit;
- a message that names the thing (file, key, line or value) and the fix;
- nothing that existed before has changed (every file under the watched folders is hashed before
  and after).

Cases are data (`Case`), so a new input path is one more entry in a list.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

TRACEBACK_MARKERS = ("Traceback (most recent call last)", "  File \"", "Error: \n", "--- Logging error ---")


@dataclass
class Case:
    """One bad input.

    `setup(tmp)` writes whatever files the case needs under `tmp` and returns nothing; `args` is the
    tmin command line (run with cwd=tmp); `expect` lists substrings that must all appear in the
    message (the thing named and the fix), matched case-insensitively; `env` adds variables.
    """

    id: str
    args: Sequence[str]
    expect: Sequence[str]
    setup: Callable[[Path], None] | None = None
    env: dict = field(default_factory=dict)
    stdin: str | None = None
    timeout: float = 120.0
    program: Sequence[str] = ("-m", "transformer_min")  # what python runs: tmin, or a script such as
    # ("benchmarks/table3.py",), a path from the repository root


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (relative path -> hex), folders included as entries."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel + "/"] = "dir"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_tmin(args: Sequence[str], cwd: Path, env: dict | None = None, stdin: str | None = None,
             timeout: float = 120.0, program: Sequence[str] = ("-m", "transformer_min")) -> subprocess.CompletedProcess:
    """`python -m transformer_min ARGS` (or `python PROGRAM ARGS`, PROGRAM's path from the repository root)
    in `cwd` with one torch thread and no TMIN_* from outside."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("TMIN_") or k == "TMIN_CACHE_DIR"}
    child["OMP_NUM_THREADS"] = "1"
    child["PYTHONUNBUFFERED"] = "1"
    src = str(Path(__file__).resolve().parents[2] / "src")
    child["PYTHONPATH"] = src + os.pathsep + child.get("PYTHONPATH", "")
    child.update(env or {})
    root = Path(__file__).resolve().parents[2]
    program = [str(root / p) if p.endswith(".py") else p for p in program]
    return subprocess.run([sys.executable, *program, *args], cwd=cwd, env=child,
                          input=stdin if stdin is not None else "", capture_output=True, text=True,
                          timeout=timeout)


def check_case(case: Case, tmp: Path) -> subprocess.CompletedProcess:
    """Run `case` in `tmp` and assert the four rules; return the process for further checks."""
    if case.setup is not None:
        case.setup(tmp)
    before = tree_digest(tmp)
    proc = run_tmin(case.args, tmp, case.env, case.stdin, case.timeout, case.program)
    message = proc.stdout + proc.stderr
    for marker in TRACEBACK_MARKERS:
        assert marker not in message, f"{case.id}: traceback shown:\n{message[-3000:]}"
    assert proc.returncode != 0, f"{case.id}: bad input accepted with exit 0:\n{message[-2000:]}"
    low = message.lower()
    missing = [e for e in case.expect if e.lower() not in low]
    assert not missing, f"{case.id}: message does not name {missing}:\n{message[-2000:]}"
    after = tree_digest(tmp)
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed, f"{case.id}: existing files changed or removed: {changed}"
    return proc
