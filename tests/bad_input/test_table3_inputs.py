"""The bad-input corpus for `tmin report --table3 DIR` (issue 26): the results folder of benchmarks/table3.py.

Each case runs `tmin report` in a fresh folder; the folder is read and checked before the claims run, so
every case answers in seconds with one line naming the file or flag and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case

GOOD = {"row": "base", "seed": 1, "updates": 100, "tokens_per_update": 1000.0, "batch_tokens": 1200, "device": "cpu",
        "val_ppl": 8.0, "val_bleu": 30.0, "test_bleu": 31.0, "params": 7_000_000}


def results(files: dict, manifest: str | None = None):
    def setup(tmp: Path) -> None:
        (tmp / "sweep" / "results").mkdir(parents=True)
        for name, body in files.items():
            (tmp / "sweep" / "results" / name).write_text(body if isinstance(body, str) else json.dumps(body))
        if manifest is not None:  # the sweep's sweep.json: the base every row's planned size comes from
            (tmp / "sweep" / "sweep.json").write_text(manifest)
    return setup


CASES = [
    Case("table3-folder-missing", expect=["--table3 nosuch", "no results/ folder", "benchmarks/table3.py"],
         args=["report", "--quick", "--table3", "nosuch"]),
    Case("table3-no-runs-yet", expect=["--table3 sweep", "no finished run yet", "benchmarks/table3.py --results sweep"],
         args=["report", "--quick", "--table3", "sweep"], setup=results({})),
    Case("table3-result-not-json", expect=["x.json", "not a readable result", "delete it and rerun"],
         args=["report", "--quick", "--table3", "sweep"], setup=results({"x.json": "{"})),
    Case("table3-result-lacks-a-key", expect=["x.json", "lacks val_bleu", "delete it"],
         args=["report", "--quick", "--table3", "sweep"],
         setup=results({"x.json": {k: v for k, v in GOOD.items() if k != "val_bleu"}})),
    Case("table3-result-unknown-row", expect=["x.json", "'Z' is not a row of Table 3", "A h=1", "delete the file"],
         args=["report", "--quick", "--table3", "sweep"], setup=results({"x.json": {**GOOD, "row": "Z"}})),
    Case("table3-mixed-budgets", expect=["--table3 sweep", "different budgets", "one sweep"],
         args=["report", "--quick", "--table3", "sweep"],
         setup=results({"a.json": GOOD, "b.json": {**GOOD, "seed": 2, "updates": 50}})),
    Case("table3-manifest-not-json", expect=["sweep.json", "not a sweep's manifest", "delete it",
                                              "benchmarks/table3.py --results sweep"],
         args=["report", "--quick", "--table3", "sweep"], setup=results({"a.json": GOOD}, manifest="{")),
    Case("table3-manifest-bad-base", expect=["sweep.json", "not a sweep's manifest", "d_model", "delete it"],
         args=["report", "--quick", "--table3", "sweep"],
         setup=results({"a.json": GOOD}, manifest='{"base": {"model": {"d_model": -1}}}')),
    Case("table3-with-stage", expect=["--table3", "full report", "drop --stage"],
         args=["report", "--quick", "--table3", "sweep", "--stage", "attention"], setup=results({"a.json": GOOD})),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_table3_bad_input(case, tmp_path):
    check_case(case, tmp_path)
