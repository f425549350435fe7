"""The bad-input corpus for `tmin export --hf` and `--engine hf --model DIR` (issue 36).

Same project and rules as test_file_inputs: no traceback, a non-zero exit, a message naming the thing and the
fix, nothing that existed changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.bad_input.harness import Case, check_case
from tests.bad_input.test_file_inputs import project, workdir  # noqa: F401  (fixtures)

pytest.importorskip("transformers", reason="the optional extra .[hf] is not installed")

EXPORT = ["export", "--hf", "hf", "--checkpoint", "runs/mt"]
HF = ["--engine", "hf", "--model", "hf"]
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def exported(tmp: Path) -> None:
    from transformer_min.translation.hf_export import export_hf

    export_hf(str(tmp / "runs" / "mt"), tmp / "hf")


def damaged(name: str, data: bytes):
    def setup(tmp: Path) -> None:
        exported(tmp)
        (tmp / "hf" / name).write_bytes(data)
    return setup


def cut_weights(tmp: Path) -> None:
    exported(tmp)
    weights = tmp / "hf" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def other_vocabulary(tmp: Path) -> None:
    """source.spm and target.spm replaced by a vocabulary learned on other text (what a copy from another
    export would do): every id would mean another piece."""
    from transformer_min.data.tokenizer import train_tokenizer

    exported(tmp)
    words = [f"zz{i} yy{i % 7} xx{i % 3} ww" for i in range(300)]
    for name in ("source.spm", "target.spm"):
        train_tokenizer(words, tmp / "hf" / name, 56)


def shuffled_vocab_json(tmp: Path) -> None:
    exported(tmp)
    path = tmp / "hf" / "vocab.json"
    vocab = json.loads(path.read_text(encoding="utf-8"))
    a, b = list(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(vocab), encoding="utf-8")


def rope_run(tmp: Path) -> None:
    """A translation run whose config says rope (the weights are the same shapes: rope adds none)."""
    import shutil

    shutil.copytree(tmp / "runs" / "mt", tmp / "runs" / "rope")
    for ckpt in (tmp / "runs" / "rope" / "checkpoints").glob("step_*.pt"):
        state = torch.load(ckpt, weights_only=True)
        state["config"]["model"]["positional"] = "rope"
        torch.save(state, ckpt)


def out_exists(tmp: Path) -> None:
    (tmp / "hf").mkdir()
    (tmp / "hf" / "notes.txt").write_text("mine")


def text_file(tmp: Path) -> None:
    (tmp / "notes.txt").write_text("my notes, not a checkpoint\n")


CASES = [
    Case("export-hf-copy-task-run", ["export", "--hf", "hf", "--checkpoint", "runs/copy"],
         ["runs/copy", "not a translation checkpoint", "fix: export a checkpoint of tmin train"]),
    Case("export-hf-text-file", ["export", "--hf", "hf", "--checkpoint", "notes.txt"],
         ["notes.txt", "tmin train"], text_file),
    Case("export-hf-existing-folder", [*EXPORT], ["--hf hf", "exists", "even with --force"], out_exists),
    Case("export-hf-existing-folder-force", [*EXPORT, "--force"], ["--hf hf", "exists", "even with --force"],
         out_exists),
    Case("export-hf-earlier-export", [*EXPORT], ["--hf hf", "holds an earlier export", "--force"], exported),
    Case("export-hf-rope", ["export", "--hf", "hf", "--checkpoint", "runs/rope"],
         ['model.positional = "rope"', "cannot be expressed as a MarianMT model", "--ctranslate2"], rope_run),
    Case("export-hf-with-out", [*EXPORT, "--out", "x"], ["--out", "not an option of --hf", "tmin export --hf DIR"]),
    Case("export-ct2-without-out", ["export", "--ctranslate2", "--checkpoint", "runs/mt"],
         ["--out", "required with --ctranslate2", "--out DIR"]),
    Case("eval-hf-without-model", ["eval", "--engine", "hf"],
         ["--model", "required with --engine hf", "tmin export --hf"]),
    Case("eval-hf-and-checkpoint", ["eval", *HF, "--checkpoint", "runs/mt"],
         ["--checkpoint and --engine hf exclude each other"], exported),
    Case("eval-hf-not-a-marian-folder", ["eval", "--engine", "hf", "--model", "runs/mt"],
         ["--model runs/mt", "not a MarianMT folder", "config.json", "tmin export --hf"]),
    Case("eval-hf-cut-weights", ["eval", *HF], ["--model hf", "could not load it", "export the checkpoint again"],
         cut_weights, env=OFFLINE),
    Case("eval-hf-config-not-json", ["eval", *HF], ["--model hf", "could not load it", "export the checkpoint again"],
         damaged("config.json", b"{oops"), env=OFFLINE),
    Case("eval-hf-manifest-not-json", ["eval", *HF], ["tmin_config.json is unreadable", "export the checkpoint again"],
         damaged("tmin_config.json", b"{oops"), env=OFFLINE),
    Case("eval-hf-other-vocabulary", ["eval", *HF], ["vocabulary mismatch", "hf/source.spm", "export the checkpoint"],
         other_vocabulary, env=OFFLINE),
    Case("eval-hf-shuffled-vocab-json", ["eval", *HF], ["--model hf", "vocab.json", "export the checkpoint again"],
         shuffled_vocab_json, env=OFFLINE),
    Case("eval-hf-int8", ["eval", *HF, "--compute-type", "int8"], ["--compute-type int8", "float32", "ctranslate2"],
         exported),
    Case("eval-hf-search-slots", ["eval", *HF, "--search", "slots"], ["--search slots", "--engine torch"], exported),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_hf_input(case, workdir):  # noqa: F811 - the fixture imported above
    proc = check_case(case, workdir)
    print(f"{case.id}: {proc.stderr.strip()}")


def test_every_case_id_is_unique():
    assert len({c.id for c in CASES}) == len(CASES) >= 15
