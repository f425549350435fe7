"""Nothing lost, nothing silently wrong (issue 25): replace only what we wrote, vocabulary identity, and the
misleading messages of export, explore, eval --src/--ref and --set.

Same project and rules as test_file_inputs (no traceback, a non-zero exit, a message naming the thing and
the fix, nothing that existed changed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case, run_tmin, tree_digest
from tests.bad_input.test_file_inputs import project, workdir  # noqa: F401  (fixtures)

MIXED_VOCAB = "--set data.vocab_size=50"  # another vocabulary than the run's (60): a cache of its own


def other_vocabulary(path: Path) -> None:
    """A sentencepiece model of another vocabulary written to `path` (same special ids, other pieces)."""
    from transformer_min.data.tokenizer import train_tokenizer

    words = [f"wort{i} ding{i % 7} haus{i % 5} sache" for i in range(200)]
    train_tokenizer(words, path, 40)


def exported(tmp: Path) -> None:
    pytest.importorskip("ctranslate2", reason="the optional extra .[export] is not installed")
    from transformer_min.translation.ct2_export import export_ctranslate2

    export_ctranslate2(str(tmp / "runs" / "mt"), tmp / "ct2")


def export_with_other_spm(tmp: Path) -> None:
    exported(tmp)
    other_vocabulary(tmp / "ct2" / "spm.model")


def run_with_other_spm(tmp: Path) -> None:
    other_vocabulary(tmp / "runs" / "mt" / "spm.model")


def own_folder(tmp: Path) -> None:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("my notes\n")


def export_plus_own_file(tmp: Path) -> None:
    exported(tmp)
    (tmp / "ct2" / "notes.txt").write_text("my notes\n")


def text_file(name: str, text: str = "my notes\n"):
    def setup(tmp: Path) -> None:
        (tmp / name).write_text(text)
    return setup


def empty_pair(tmp: Path) -> None:
    (tmp / "empty.de").write_text("")
    (tmp / "empty.en").write_text("")


def blank_pair(tmp: Path) -> None:
    (tmp / "blank.de").write_text("\n  \n")
    (tmp / "blank.en").write_text("\n\n")


def src_is_a_folder(tmp: Path) -> None:
    (tmp / "testdir").mkdir()
    (tmp / "testdir" / "test.de").write_text("ein hund .\n")
    (tmp / "ref.en").write_text("a dog .\n")


def config_with_heads(tmp: Path) -> None:
    (tmp / "config.toml").write_text("[model]\nnum_heads = 8\n")


EXPORT = ["export", "--ctranslate2", "--checkpoint", "runs/mt", "--out"]
CT2 = ["--engine", "ctranslate2", "--model", "ct2"]
MISMATCH = ["vocabulary mismatch", "fix:"]

CASES = [
    # a user's files are never replaced, --force or not
    Case("export-force-over-own-folder", [*EXPORT, "mine", "--force"],
         ["--out mine", "not an earlier tmin export", "even with --force"], own_folder),
    Case("export-force-over-export-plus-own-file", [*EXPORT, "ct2", "--force"],
         ["--out ct2", "not an earlier tmin export"], export_plus_own_file),
    Case("export-out-is-a-text-file", [*EXPORT, "notes.txt"], ["--out notes.txt", "is a file", "directory"],
         text_file("notes.txt")),
    Case("export-out-is-a-text-file-force", [*EXPORT, "notes.txt", "--force"],
         ["--out notes.txt", "is a file", "directory"], text_file("notes.txt")),
    Case("explore-static-over-text-file", ["explore", "--static", "notes.txt"],
         ["--static notes.txt", "not an earlier tmin explore page"], text_file("notes.txt")),
    Case("explore-static-over-other-html", ["explore", "--static", "page.html"],
         ["--static page.html", "not an earlier tmin explore page"], text_file("page.html", "<html>mine</html>\n")),
    Case("log-file-over-text-file", ["--log-file", "notes.txt", "doctor"], ["--log-file notes.txt", "not a tmin log"],
         text_file("notes.txt")),
    Case("translate-attention-over-own-png", ["translate", "--checkpoint", "runs/mt", "--attention", "photo.png",
                                              "ein hund ."], ["--attention photo.png", "not an earlier tmin figure"],
         text_file("photo.png", "\x89PNG not ours")),
    Case("translate-csv-over-own-file", ["translate", "--checkpoint", "runs/mt", "--csv", "out", "ein hund ."],
         ["--csv", "cross_attn_head0.csv", "not an earlier tmin attention csv"],
         lambda tmp: ((tmp / "out").mkdir(), (tmp / "out" / "cross_attn_head0.csv").write_text("a,b\n1,2\n"))),
    Case("report-out-own-folder", ["report", "--out", "mine", "--stage", "attention"],
         ["--out mine", "not an earlier tmin report"], own_folder),
    Case("average-out-over-text-file", ["average", "runs/mt", "--out", "notes.txt"],
         ["--out notes.txt", "not an earlier tmin average"], text_file("notes.txt")),
    # vocabulary identity: model and data, model and export
    Case("translate-ct2-export-other-spm", ["translate", *CT2, "ein hund ."], [*MISMATCH, "ct2/spm.model"],
         export_with_other_spm),
    Case("eval-ct2-split-other-vocabulary", ["eval", *CT2, "--split", "test_2016_flickr", *MIXED_VOCAB.split()],
         [*MISMATCH, "the prepared data"], exported),
    Case("eval-torch-split-other-vocabulary", ["eval", "--checkpoint", "runs/mt", "--split", "test_2016_flickr",
                                               *MIXED_VOCAB.split()], [*MISMATCH, "the prepared data"]),
    Case("translate-run-spm-replaced", ["translate", "--checkpoint", "runs/mt", "ein hund ."],
         [*MISMATCH, "runs/mt/spm.model"], run_with_other_spm),
    Case("export-run-spm-replaced", [*EXPORT, "ct2"], [*MISMATCH, "runs/mt/spm.model"], run_with_other_spm),
    # eval --src/--ref
    Case("eval-src-ref-both-empty", ["eval", "--checkpoint", "runs/mt", "--src", "empty.de", "--ref", "empty.en"],
         ["--src empty.de", "no sentences"], empty_pair),
    Case("eval-src-ref-blank-lines", ["eval", "--checkpoint", "runs/mt", "--src", "blank.de", "--ref", "blank.en"],
         ["--src blank.de", "no sentences"], blank_pair),
    Case("eval-src-is-a-folder", ["eval", "--checkpoint", "runs/mt", "--src", "testdir", "--ref", "ref.en"],
         ["--src testdir", "is a folder", "not a file"], src_is_a_folder),
    # where a value came from
    Case("set-value-blamed-on-config-toml", ["--set", "model.d_model=100", "verify"],
         ["--set model.d_model=100", "num_heads"], config_with_heads),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_integrity_bad_input(case, workdir):  # noqa: F811 - the fixture imported above
    proc = check_case(case, workdir)
    if case.id == "set-value-blamed-on-config-toml":
        assert not proc.stderr.startswith("error: config.toml:"), proc.stderr


def test_every_case_id_is_unique():
    assert len({c.id for c in CASES}) == len(CASES)


def test_export_force_replaces_an_earlier_export_only(workdir):  # noqa: F811
    """--force replaces an export of ours (its manifest lists every file), and the new one carries the run's
    vocabulary hash and the list of its files."""
    exported(workdir)
    before = json.loads((workdir / "ct2" / "tmin_config.json").read_text())
    assert set(before["files"]) == {p.name for p in (workdir / "ct2").iterdir()}
    again = run_tmin([*EXPORT, "ct2"], workdir)
    assert again.returncode == 2 and "--force" in again.stderr
    proc = run_tmin([*EXPORT, "ct2", "--force"], workdir)
    assert proc.returncode == 0, proc.stderr
    from transformer_min.data.tokenizer import vocab_hash

    meta = json.loads((workdir / "ct2" / "tmin_config.json").read_text())
    assert meta["vocab"] == vocab_hash(workdir / "runs" / "mt" / "spm.model")
    assert not [p for p in workdir.iterdir() if p.name.startswith(".ct2")]  # no temporary folder left


def test_explore_static_replaces_its_own_page(tmp_path):
    first = run_tmin(["explore", "--static", "page.html"], tmp_path)
    assert first.returncode == 0, first.stderr
    digest = tree_digest(tmp_path)
    second = run_tmin(["explore", "--static", "page.html"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert set(tree_digest(tmp_path)) == set(digest)


def test_run_and_cache_carry_the_vocabulary_hash(workdir):  # noqa: F811
    """The checkpoint's recorded hash and the data cache's are the sha256 of the spm.model bytes, short form."""
    import hashlib

    import torch

    spm = workdir / "runs" / "mt" / "spm.model"
    expected = hashlib.sha256(spm.read_bytes()).hexdigest()[:12]
    state = torch.load(next((workdir / "runs" / "mt" / "checkpoints").glob("step_*.pt")), weights_only=True)
    assert state["extra"]["vocab"] == expected
    metas = [json.loads(p.read_text()) for p in (workdir / "runs" / "data").glob("*/meta.json")]
    assert expected in [m.get("vocab") for m in metas]


@pytest.mark.parametrize("driver, value, named", [("d_model", 1 << 16, "model.d_model"),
                                                  ("relative_clip", 1 << 24, "model.relative_clip")])
def test_memory_refusal_names_the_driving_field(driver, value, named):
    """Not train.batch_tokens when the model's own size drives the need."""
    import dataclasses

    from transformer_min.core.config import Config
    from transformer_min.core.errors import ConfigError
    from transformer_min.model.memory import check_batch_memory

    cfg = Config()
    model = dataclasses.replace(cfg.model, positional="relative" if driver == "relative_clip" else cfg.model.positional,
                                **{driver: value})
    if driver == "d_model":
        model = dataclasses.replace(model, num_heads=8)
    cfg = dataclasses.replace(cfg, model=model)
    with pytest.raises(ConfigError) as e:
        check_batch_memory(cfg, available=2 * 10 ** 9)
    assert str(e.value).startswith(f"{named} = "), str(e.value)
    assert f"lower {named}" in str(e.value)


def test_memory_refusal_still_names_batch_tokens():
    import dataclasses

    from transformer_min.core.config import Config
    from transformer_min.core.errors import ConfigError
    from transformer_min.model.memory import check_batch_memory

    cfg = Config()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_tokens=10 ** 7))
    with pytest.raises(ConfigError, match=r"^train\.batch_tokens = "):
        check_batch_memory(cfg, available=2 * 10 ** 9)

