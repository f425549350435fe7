"""The bad-input cases of `bash benchmarks/gpu.sh --cpu-class` (benchmarks/cpu_class.py, issue 37): its counts are
checked when parsed, before any benchmark or training starts, and the message names the flag."""

from __future__ import annotations

import pytest

from tests.bad_input.harness import Case, check_case

PROGRAM = ("benchmarks/cpu_class.py",)
CASES = [
    Case(f"cpu-class-{flag.strip('-')}-{value}", args=[flag, value, "--dry-run", "--out", "out"], program=PROGRAM,
         expect=[flag, "expected a positive integer"])
    for flag in ("--reps", "--repeats", "--steps", "--sentences", "--threads") for value in ("0", "many")
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cpu_class_bad_input(case, tmp_path):
    proc = check_case(case, tmp_path)
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert proc.returncode == 2
