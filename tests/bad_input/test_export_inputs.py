"""The bad-input corpus for `tmin export --ctranslate2` and `--engine ctranslate2 --model DIR` (issue 18).

Same project and rules as test_file_inputs: no traceback, a non-zero exit, a message naming the thing and the
fix, nothing that existed changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case
from tests.bad_input.test_file_inputs import project, workdir  # noqa: F401  (fixtures)

pytest.importorskip("ctranslate2", reason="the optional extra .[export] is not installed")

EXPORT = ["export", "--ctranslate2", "--checkpoint", "runs/mt", "--out"]
CT2 = ["--engine", "ctranslate2", "--model", "ct2"]


def exported(tmp: Path) -> None:
    from transformer_min.translation.ct2_export import export_ctranslate2

    export_ctranslate2(str(tmp / "runs" / "mt"), tmp / "ct2")


def out_exists(tmp: Path) -> None:
    (tmp / "ct2").mkdir()
    (tmp / "ct2" / "notes.txt").write_text("mine")


def out_is_a_file(tmp: Path) -> None:
    (tmp / "ct2").write_text("mine")


def damaged(name: str, data: bytes):
    def setup(tmp: Path) -> None:
        exported(tmp)
        (tmp / "ct2" / name).write_bytes(data)
    return setup


def config_without_model(tmp: Path) -> None:
    exported(tmp)
    meta = json.loads((tmp / "ct2" / "tmin_config.json").read_text())
    del meta["config"]
    (tmp / "ct2" / "tmin_config.json").write_text(json.dumps(meta))


CASES = [
    Case("export-copy-task-checkpoint", ["export", "--ctranslate2", "--checkpoint", "runs/copy", "--out", "ct2"],
         ["runs/copy", "not a translation checkpoint", "fix: export a checkpoint of tmin train"]),
    Case("export-out-exists", [*EXPORT, "ct2"], ["--out ct2", "exists", "--force"], out_exists),
    Case("export-out-is-a-file", [*EXPORT, "ct2", "--force"], ["--out ct2", "is a file", "choose a directory"],
         out_is_a_file),
    Case("export-without-format", ["export", "--checkpoint", "runs/mt", "--out", "ct2"], ["--ctranslate2", "required"]),
    Case("export-bad-quantization", [*EXPORT, "ct2", "--quantization", "int4"],
         ["--quantization", "'int4'", "int8"]),
    Case("export-missing-checkpoint", ["export", "--ctranslate2", "--checkpoint", "runs/nope", "--out", "ct2"],
         ["runs/nope"]),
    Case("translate-ct2-without-model", ["translate", "--engine", "ctranslate2", "ein hund ."],
         ["--model", "required with --engine ctranslate2", "tmin export --ctranslate2"]),
    Case("translate-torch-without-checkpoint", ["translate", "--model", "ct2", "ein hund ."],
         ["--checkpoint", "required with --engine torch", "--model is for --engine ctranslate2"]),
    Case("translate-ct2-model-not-an-export", ["translate", "--engine", "ctranslate2", "--model", "runs/mt", "x"],
         ["--model runs/mt", "not a tmin export", "model.bin", "tmin export --ctranslate2"]),
    Case("translate-ct2-and-checkpoint", ["translate", *CT2, "--checkpoint", "runs/mt", "x"],
         ["--checkpoint and --engine ctranslate2 exclude each other"], exported),
    Case("eval-ct2-search-slots", ["eval", *CT2, "--search", "slots"], ["--search slots", "--engine torch"], exported),
    Case("translate-ct2-attention", ["translate", *CT2, "--attention", "a.png", "x"],
         ["--attention", "--engine torch"], exported),
    Case("translate-ct2-bad-compute-type", ["translate", *CT2, "--compute-type", "int3", "x"],
         ["--compute-type", "'int3'", "int8"], exported),
    Case("translate-ct2-config-not-json", ["translate", *CT2, "x"],
         ["tmin_config.json is unreadable", "export the checkpoint again"], damaged("tmin_config.json", b"{oops")),
    Case("translate-ct2-config-without-model", ["translate", *CT2, "x"],
         ["tmin_config.json is unreadable", "export the checkpoint again"], config_without_model),
    Case("translate-ct2-model-bin-damaged", ["translate", *CT2, "x"],
         ["--model ct2", "could not load it", "export the checkpoint again"], damaged("model.bin", b"\x00" * 64)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_export_input(case, workdir):  # noqa: F811 - the fixture imported above
    proc = check_case(case, workdir)
    print(f"{case.id}: {proc.stderr.strip()}")


def test_every_case_id_is_unique():
    assert len({c.id for c in CASES}) == len(CASES) >= 15
