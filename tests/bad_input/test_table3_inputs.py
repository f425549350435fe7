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


# ----------------------------------------------------------------------------- the driver, benchmarks/table3.py
# Its relative paths are the repository root's, so every path here is absolute: "{tmp}" is the case's folder.
# Each case is refused before any run starts (nothing trains), with one line naming the value and the fix.
def driver_files(files: dict, budgets: dict | None = None):
    def setup(tmp: Path) -> None:
        results(files)(tmp)
        for name, body in (budgets or {}).items():
            (tmp / "sweep" / "budgets").mkdir(parents=True, exist_ok=True)
            (tmp / "sweep" / "budgets" / name).write_text(body if isinstance(body, str) else json.dumps(body))
    return setup


def a_file(tmp: Path) -> None:
    (tmp / "afile").write_text("mine\n")


DRIVER = ("benchmarks/table3.py",)
DRY = ["--dry-run"]
DRIVER_CASES = [
    Case("t3-seeds-negative", args=["--seeds=-1", *DRY], expect=["--seeds", "'-1'", "not a list of seeds", "e.g. 1,2"]),
    Case("t3-seeds-not-a-number", args=["--seeds", "one", *DRY], expect=["--seeds", "'one'", "whole numbers"]),
    Case("t3-seeds-empty", args=["--seeds", "", *DRY], expect=["--seeds", "''", "not a list of seeds"]),
    Case("t3-base-seeds-twice", args=["--base-seeds", "1,1", *DRY], expect=["--base-seeds", "each once"]),
    Case("t3-steps-zero", args=["--steps", "0", *DRY], expect=["--steps", "'0'", "whole number > 0"]),
    Case("t3-jobs-not-a-number", args=["--jobs", "many", *DRY], expect=["--jobs", "'many'", "whole number > 0"]),
    Case("t3-budgets-decreasing", args=["--long", "--budgets", "2912,1456", *DRY],
         expect=["--budgets", "increasing order", "1456,2912"]),
    Case("t3-budgets-without-long", args=["--budgets", "1456", *DRY], expect=["--budgets", "add --long"]),
    Case("t3-time-limit-nan", args=["--time-limit", "nan", *DRY], expect=["--time-limit", ">= 0"]),
    Case("t3-results-is-a-file", args=["--results", "{tmp}/afile", *DRY], setup=a_file,
         expect=["afile", "is a file, not a folder", "name a folder"]),
    Case("t3-results-under-a-file", args=["--results", "{tmp}/afile/sub", *DRY], setup=a_file,
         expect=["afile", "is a file, not a folder"]),
    Case("t3-runs-dir-is-a-file", args=["--runs-dir", "{tmp}/afile", *DRY], setup=a_file,
         expect=["--runs-dir", "afile", "is a file"]),
    Case("t3-results-name-too-long", args=["--results", "{tmp}/" + "x" * 300, *DRY],
         expect=["--results", "longer than 255 bytes", "shorter folder name"]),
    Case("t3-table-name-too-long", args=["table", "{tmp}/" + "y" * 300], expect=["table3.py", "too long", "a shorter name"]),
    Case("t3-rows-unknown-long-name", args=["--rows", "z" * 400, *DRY], expect=["--rows", "unknown", "choose slugs"]),
    Case("t3-config-missing", args=["--config", "{tmp}/nosuch.toml", *DRY], expect=["nosuch.toml"]),
    Case("t3-table-record-wrong-types", args=["table", "{tmp}/sweep"],
         setup=driver_files({"x.json": {**GOOD, "val_bleu": "high", "updates": True}}),
         expect=["x.json", "val_bleu", "updates", "wrong type", "delete it"]),
    Case("t3-table-record-not-an-object", args=["table", "{tmp}/sweep"], setup=driver_files({"x.json": "[1, 2]"}),
         expect=["x.json", "lacks", "delete it"]),
    Case("t3-table-budget-record-wrong-types", args=["table", "{tmp}/sweep"],
         setup=driver_files({"a.json": GOOD}, {"base_s1_u100.json": {**GOOD, "budget": "x"}}),
         expect=["base_s1_u100.json", "budget", "wrong type", "delete it"]),
    Case("t3-table-budget-not-its-updates", args=["table", "{tmp}/sweep"],
         setup=driver_files({"a.json": GOOD}, {"base_s1_u200.json": {**GOOD, "budget": 200}}),
         expect=["base_s1_u200.json", "budget 200 but 100 updates", "--long"]),
    Case("t3-long-manifest-budgets-wrong-type",
         args=["--long", "--rows", "base", "--results", "{tmp}/sweep", "--config", "{tmp}/nosuch.toml"],
         setup=driver_files({}, {"sweep.json": {"budgets": "abc"}}), expect=["nosuch.toml"]),
]


def _in(case: Case, tmp: Path) -> Case:
    import dataclasses

    return dataclasses.replace(case, program=DRIVER, args=[a.replace("{tmp}", str(tmp)) for a in case.args])


@pytest.mark.parametrize("case", DRIVER_CASES, ids=[c.id for c in DRIVER_CASES])
def test_table3_driver_bad_input(case, tmp_path):
    check_case(_in(case, tmp_path), tmp_path)
