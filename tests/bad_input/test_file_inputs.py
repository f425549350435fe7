"""The bad-input corpus for files (issue 13): checkpoints, run directories and data files.

Every case runs `tmin` in a fresh folder that holds a copy of a small, real project: a trained copy-task
run (runs/copy), a trained translation run (runs/mt) with its data (data/multi30k) and the two configs.
The case's setup then damages what it names, and `check_case` holds the answer to the four rules (no
traceback, non-zero exit, a message naming the thing and the fix, nothing that existed changed).
"""

from __future__ import annotations

import gzip
import os
import pickle
import random
import shutil
from pathlib import Path

import pytest
import torch

from tests.bad_input.harness import Case, check_case
from tests.data.conftest import make_pairs, write_split
from tests.training.test_distributed import TINY_TOML

COPY_TOML = TINY_TOML.replace("checkpoint_interval = 2", "checkpoint_interval = 1") + """steps = 2
out_dir = "runs"
name = "copy"
"""

MT_TOML = """
[model]
d_model = 32
num_heads = 4
d_ff = 64
num_layers = 1
max_len = 64

[vocab]
src_size = 60
tgt_size = 60

[data]
data_dir = "data/multi30k"
vocab_size = 60
max_len = 40

[decode]
beam_size = 2

[train]
task = "translation"
steps = 2
batch_tokens = 400
warmup_steps = 30
eval_interval = 1000
checkpoint_interval = 2
seed = 3
device = "cpu"
out_dir = "runs"
name = "mt"
"""


class Payload:
    """Pickles as a call of os.system: never to be run by loading."""

    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    """A small project built once: configs, Multi30k-like data, a trained copy run and a translation run.
    Paths inside are relative, so a copy of the folder is a working project of its own."""
    from transformer_min.core.project import load_project
    from transformer_min.cli.train import train

    root = tmp_path_factory.mktemp("project")
    (root / "copy.toml").write_text(COPY_TOML)
    (root / "mt.toml").write_text(MT_TOML)
    data = root / "data" / "multi30k"
    write_split(data, "train", make_pairs(120, 1))
    write_split(data, "val", make_pairs(10, 2), gz=False)
    write_split(data, "test_2016_flickr", make_pairs(10, 3))
    cwd = os.getcwd()
    os.chdir(root)
    try:
        train(load_project("copy.toml", quiet=True).config)
        train(load_project("mt.toml", quiet=True).config)
    finally:
        os.chdir(cwd)
    return root


@pytest.fixture
def workdir(project, tmp_path) -> Path:
    shutil.copytree(project, tmp_path, dirs_exist_ok=True)
    return tmp_path


# ----------------------------------------------------------------------------- helpers for the setups
def _ckpt(tmp: Path, step: int = 2, run: str = "copy") -> Path:
    return tmp / "runs" / run / "checkpoints" / f"step_{step:07d}.pt"


def _state(tmp: Path) -> dict:
    return torch.load(_ckpt(tmp), weights_only=True)


def write_bytes(name: str, data: bytes):
    def setup(tmp: Path) -> None:
        (tmp / name).write_bytes(data)
    return setup


def evil_zip(tmp: Path) -> None:
    torch.save({"format": "transformer-min/1", "model": Payload()}, tmp / "evil.pt")


def evil_pickle(proto: int):
    return write_bytes("evil.pkl", pickle.dumps({"format": "transformer-min/1", "model": Payload()}, protocol=proto))


def random_bytes(tmp: Path) -> None:
    rng = random.Random(0)
    (tmp / "random.pt").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))


def truncate(path_of, keep: float = 0.5):
    def setup(tmp: Path) -> None:
        p = path_of(tmp)
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * keep)])
    return setup


def without(key: str):
    def setup(tmp: Path) -> None:
        state = _state(tmp)
        del state[key]
        torch.save(state, tmp / "partial.pt")
    return setup


def altered(tmp: Path, name: str, change) -> None:
    state = _state(tmp)
    change(state)
    torch.save(state, tmp / name)


def wrong_shape(tmp: Path) -> None:
    def change(state):
        key = next(k for k in state["model"] if k.endswith("weight") and state["model"][k].dim() == 2)
        state["model"][key] = torch.zeros(3, 3)
    altered(tmp, "shape.pt", change)


def bad_embedded_config(tmp: Path) -> None:
    altered(tmp, "badcfg.pt", lambda s: s["config"]["model"].update(d_model=-4))


def other_format(tmp: Path) -> None:
    altered(tmp, "other.pt", lambda s: s.update(format="someone-else/3"))


def foreign_step_file(tmp: Path) -> None:
    """A step file of a wider model dropped among runs/copy's checkpoints."""
    def change(state):
        key = next(k for k in state["model"] if state["model"][k].dim() == 2)
        state["model"][key] = torch.zeros(*(2 * n for n in state["model"][key].shape))
    state = _state(tmp)
    change(state)
    torch.save(state, _ckpt(tmp, 3))


def junk_step_file(tmp: Path) -> None:
    _ckpt(tmp, 3).write_bytes(b"\x00junk" * 100)


def all_steps_damaged(tmp: Path) -> None:
    for p in (tmp / "runs" / "copy" / "checkpoints").glob("step_*.pt"):
        p.write_bytes(p.read_bytes()[:300])


def empty_run(tmp: Path) -> None:
    (tmp / "runs" / "empty").mkdir(parents=True)


def early_run(tmp: Path) -> None:
    """A run killed before its first checkpoint: config and metrics, no step file."""
    d = tmp / "runs" / "early"
    d.mkdir(parents=True)
    shutil.copy(tmp / "runs" / "copy" / "config.toml", d / "config.toml")
    (d / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')


def edit_run_config(old: str, new: str):
    def setup(tmp: Path) -> None:
        p = tmp / "runs" / "copy" / "config.toml"
        text = p.read_text()
        assert old in text, old
        p.write_text(text.replace(old, new, 1))
    return setup


def toml_with(line_old: str, line_new: str, name: str = "other.toml"):
    def setup(tmp: Path) -> None:
        (tmp / name).write_text(COPY_TOML.replace(line_old, line_new))
    return setup


def run_dir_is_a_file(tmp: Path) -> None:
    (tmp / "runs" / "taken").write_text("not a folder\n")


def out_dir_is_a_file(tmp: Path) -> None:
    (tmp / "blocked").write_text("a file where a folder should be\n")


_HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, str(os.getpid()).encode())
time.sleep(60)
"""


def run_in_use(tmp: Path) -> None:
    """Another process holds runs/copy (an exclusive flock on its .lock, as a training tmin train does); it
    lets go by itself after 60 s."""
    import subprocess
    import sys
    import time

    lock = tmp / "runs" / "copy" / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(lock)])
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text() == str(holder.pid)):
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.05)


def data_file(split: str, lang: str) -> Path:
    name = f"{split}.lc.norm.tok.{lang}"
    return Path("data/multi30k/tok") / (name if split == "val" else name + ".gz")


def rewrite_split(split: str, lines_de, lines_en, gz: bool = True):
    def setup(tmp: Path) -> None:
        for lang, lines in (("de", lines_de), ("en", lines_en)):
            p = tmp / data_file(split, lang)
            text = "".join(x + "\n" for x in lines)
            p.write_bytes(gzip.compress(text.encode()) if p.suffix == ".gz" else text.encode())
    return setup


def non_utf8(split: str, line: int):
    def setup(tmp: Path) -> None:
        p = tmp / data_file(split, "en")
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        lines = raw.split(b"\n")
        lines[line - 1] += " caf\xe9".encode("latin-1")
        out = b"\n".join(lines)
        p.write_bytes(gzip.compress(out) if p.suffix == ".gz" else out)
    return setup


def plain_named_gz(tmp: Path) -> None:
    p = tmp / data_file("train", "de")
    p.write_bytes(gzip.decompress(p.read_bytes()))


def flipped_gz(tmp: Path) -> None:
    p = tmp / data_file("train", "en")
    data = bytearray(p.read_bytes())
    for i in range(20, 60):
        data[i] ^= 0x5A
    p.write_bytes(bytes(data))


def misaligned(tmp: Path) -> None:
    p = tmp / data_file("val", "en")
    p.write_text(p.read_text() + "one extra line\n")


def missing_split(tmp: Path) -> None:
    (tmp / data_file("test_2016_flickr", "de")).unlink()


def split_is_a_folder(tmp: Path) -> None:
    p = tmp / data_file("val", "de")
    p.unlink()
    p.mkdir()


def broken_cache(tmp: Path) -> None:
    for p in (tmp / "runs" / "data").glob("*/splits.pt"):
        p.write_bytes(b"\x80\x02garbage")


def mix_copy_with_mt(tmp: Path) -> None:
    """runs/mt's step file replaced by a copy-task checkpoint (no spm.model behind it is not the issue)."""
    shutil.copy(_ckpt(tmp), _ckpt(tmp, 2, "mt"))
    _ckpt(tmp, 2, "mt").rename(tmp / "runs" / "mt" / "checkpoints" / "step_0000009.pt")
    (tmp / "runs" / "mt" / "spm.model").unlink()


CHECKPOINT_FIX = "checkpoints/*.pt"
DECODE = ["decode", "3 5 7", "--checkpoint"]

CHECKPOINTS = [
    Case("decode-random-bytes", [*DECODE, "random.pt"], ["random.pt", "not a checkpoint", CHECKPOINT_FIX],
         random_bytes),
    Case("decode-metrics-file", [*DECODE, "runs/copy/metrics.jsonl"],
         ["metrics.jsonl", "not a checkpoint (a text file", CHECKPOINT_FIX]),
    Case("decode-config-toml", [*DECODE, "copy.toml"], ["copy.toml", "not a checkpoint", CHECKPOINT_FIX]),
    Case("decode-png", [*DECODE, "runs/copy/metrics.png"], ["metrics.png", "not a checkpoint", CHECKPOINT_FIX]),
    Case("decode-pickled-code-in-torch-zip", [*DECODE, "evil.pt"],
         ["evil.pt", "refusing: the file holds pickled code (`os.system`)", CHECKPOINT_FIX], evil_zip),
    Case("decode-pickled-code-protocol-0", [*DECODE, "evil.pkl"],
         ["evil.pkl", "refusing: the file holds pickled code (`os.system`)", CHECKPOINT_FIX], evil_pickle(0)),
    Case("decode-pickled-code-protocol-4", [*DECODE, "evil.pkl"],
         ["evil.pkl", "refusing: the file holds pickled code (`os.system`)", CHECKPOINT_FIX], evil_pickle(4)),
    Case("decode-plain-pickle", [*DECODE, "plain.pkl"], ["plain.pkl", "not a checkpoint", CHECKPOINT_FIX],
         write_bytes("plain.pkl", pickle.dumps({"model": [1, 2]}))),
    Case("decode-empty-file", [*DECODE, "empty.pt"], ["empty.pt", "empty (0 bytes)", CHECKPOINT_FIX],
         write_bytes("empty.pt", b"")),
    Case("decode-truncated-checkpoint", [*DECODE, "runs/copy/checkpoints/step_0000002.pt"],
         ["step_0000002.pt", "truncated or damaged", CHECKPOINT_FIX], truncate(_ckpt)),
    Case("decode-no-model-entry", [*DECODE, "partial.pt"],
         ["partial.pt", "has no 'model' entry", "use another checkpoint"], without("model")),
    Case("decode-no-config-entry", [*DECODE, "partial.pt"],
         ["partial.pt", "has no 'config' entry", "use another checkpoint"], without("config")),
    Case("decode-no-step-entry", [*DECODE, "partial.pt"],
         ["partial.pt", "has no 'step' entry", "use another checkpoint"], without("step")),
    Case("decode-other-format", [*DECODE, "other.pt"],
         ["other.pt", "not a transformer-min checkpoint", CHECKPOINT_FIX], other_format),
    Case("decode-weights-of-another-shape", [*DECODE, "shape.pt"],
         ["shape.pt", "weights do not fit", "use another checkpoint"], wrong_shape),
    Case("decode-invalid-embedded-config", [*DECODE, "badcfg.pt"],
         ["badcfg.pt", "model.d_model", "use another checkpoint"], bad_embedded_config),
    Case("decode-missing-file", [*DECODE, "nothere.pt"], ["nothere.pt", "not found", CHECKPOINT_FIX]),
    Case("decode-run-without-checkpoints", [*DECODE, "runs/empty"],
         ["runs/empty", "no checkpoint found", "run directory"], empty_run),
    Case("decode-run-all-checkpoints-damaged", [*DECODE, "runs/copy"],
         ["step_0000002.pt", "truncated", "no earlier step checkpoint"], all_steps_damaged),
    Case("average-two-runs-of-different-shapes", ["average", "runs/copy", "--last", "3"],
         ["step_0000001.pt", "step_0000003.pt", "tensor '", "shape", "one run only"], foreign_step_file),
    Case("average-junk-step-file", ["average", "runs/copy", "--last", "2"],
         ["step_0000003.pt", "not a checkpoint", CHECKPOINT_FIX], junk_step_file),
    Case("average-run-without-checkpoints", ["average", "runs/empty"],
         ["runs/empty", "no step checkpoints"], empty_run),
    Case("average-last-zero", ["average", "runs/copy", "--last", "0"], ["--last", "positive integer", "'0'"]),
    Case("eval-pickled-code", ["eval", "--checkpoint", "evil.pt"], ["evil.pt", "pickled code (`os.system`)"],
         evil_zip),
    Case("translate-random-bytes", ["translate", "--checkpoint", "random.pt", "ein hund ."],
         ["random.pt", "not a checkpoint", CHECKPOINT_FIX], random_bytes),
    Case("translate-copy-task-checkpoint", ["translate", "--checkpoint", "runs/mt", "ein hund ."],
         ["step_0000009.pt", "no spm.model", "runs/<name>/checkpoints"], mix_copy_with_mt),
    Case("resume-pickled-code", ["train", "--resume", "evil.pt"], ["evil.pt", "pickled code (`os.system`)"],
         evil_zip),
    Case("resume-all-checkpoints-damaged", ["train", "--resume", "runs/copy"],
         ["step_0000002.pt", "truncated", "no earlier step checkpoint"], all_steps_damaged),
]

RUN_DIRS = [
    Case("train-existing-run", ["train", "--config", "copy.toml"],
         ["runs/copy", "already holds a run", "--resume runs/copy", "--name", "--overwrite"]),
    Case("train-existing-run-named-on-the-command-line", ["train", "--config", "other.toml", "--name", "copy"],
         ["runs/copy", "already holds a run", "--resume", "--overwrite"], toml_with('name = "copy"', 'name = "x"')),
    Case("train-name-dotdot", ["train", "--config", "copy.toml", "--name", "../../x"],
         ["train.name", "../../x", "leaves train.out_dir", "plain name"]),
    Case("train-name-absolute", ["train", "--config", "copy.toml", "--name", "/tmp/tmin-abs-run"],
         ["train.name", "/tmp/tmin-abs-run", "leaves train.out_dir", "plain name"]),
    Case("train-name-dot", ["train", "--config", "copy.toml", "--name", "."],
         ["train.name", "leaves train.out_dir", "plain name"]),
    Case("train-name-dotdot-in-toml", ["train", "--config", "other.toml"],
         ["train.name", "../escape", "leaves train.out_dir", "plain name"],
         toml_with('name = "copy"', 'name = "../escape"')),
    Case("train-run-dir-is-a-file", ["train", "--config", "copy.toml", "--name", "taken"],
         ["runs/taken", "not a folder", "another --name"], run_dir_is_a_file),
    Case("train-out-dir-is-a-file", ["train", "--config", "copy.toml", "--out-dir", "blocked"],
         ["blocked/copy", "cannot create the run directory", "train.out_dir"], out_dir_is_a_file),
    Case("resume-edited-train-field", ["train", "--resume", "runs/copy"],
         ["runs/copy/config.toml", "train.lr_factor (file 0.5, checkpoint 1.0)", "undo it", "--config"],
         edit_run_config("lr_factor = 1.0", "lr_factor = 0.5")),
    Case("resume-edited-model-field", ["train", "--resume", "runs/copy", "--steps", "5"],
         ["runs/copy/config.toml", "model.d_model (file 48, checkpoint 32)", "undo it"],
         edit_run_config("d_model = 32", "d_model = 48")),
    Case("resume-config-toml-broken", ["train", "--resume", "runs/copy"],
         ["runs/copy/config.toml", "TOML", "fix the file or delete it"],
         edit_run_config("[train]", "[train")),
    Case("resume-with-overwrite", ["train", "--resume", "runs/copy", "--overwrite"],
         ["--overwrite", "--resume", "drop one of them"]),
    Case("resume-before-first-checkpoint", ["train", "--resume", "runs/early"],
         ["runs/early", "before its first checkpoint", "--overwrite"], early_run),
    Case("resume-missing-run", ["train", "--resume", "runs/nothere"], ["runs/nothere", "no such run directory"]),
    Case("resume-run-still-training", ["train", "--resume", "runs/copy", "--steps", "4"],
         ["runs/copy is in use by another tmin train (process", "nothing was changed", "run this again"], run_in_use),
    Case("overwrite-run-still-training", ["train", "--config", "copy.toml", "--overwrite"],
         ["runs/copy is in use by another tmin train (process", "nothing was changed", "run this again"], run_in_use),
    Case("resume-with-another-model", ["train", "--resume", "runs/copy", "--config", "other.toml"],
         ["model.d_model: checkpoint 32, config 64", "drop --config"], toml_with("d_model = 32", "d_model = 64")),
]

PREPARE = ["data", "prepare", "--config", "mt.toml"]
DATA_FILES = [
    Case("prepare-train-empty", PREPARE, ["data.train_split", "'train' has no text", "train.lc.norm.tok.de.gz"],
         rewrite_split("train", [""] * 120, [""] * 120)),
    Case("prepare-train-whitespace", PREPARE, ["data.train_split", "'train' has no text", "put its sentences"],
         rewrite_split("train", ["  \t "] * 120, [" "] * 120)),
    Case("prepare-val-whitespace", PREPARE, ["data.valid_split", "'val' has no text", "val.lc.norm.tok.en"],
         rewrite_split("val", [" "] * 10, ["\t"] * 10)),
    Case("prepare-test-empty", PREPARE, ["data.test_split", "'test_2016_flickr' has no text"],
         rewrite_split("test_2016_flickr", [""] * 10, [""] * 10)),
    Case("prepare-truncated-gz", PREPARE, ["train.lc.norm.tok.de.gz", "truncated", "download or copy it again"],
         truncate(lambda t: t / data_file("train", "de"), 0.6)),
    Case("prepare-damaged-gz", PREPARE, ["train.lc.norm.tok.en.gz", "damaged", "download or copy it again"],
         flipped_gz),
    Case("prepare-plain-text-named-gz", PREPARE, ["train.lc.norm.tok.de.gz", "not gzip", "drop the .gz"],
         plain_named_gz),
    Case("prepare-non-utf8-plain", PREPARE, ["val.lc.norm.tok.en, line 7", "not utf-8", "convert the file"],
         non_utf8("val", 7)),
    Case("prepare-non-utf8-gz", PREPARE, ["train.lc.norm.tok.en.gz, line 101", "not utf-8", "convert the file"],
         non_utf8("train", 101)),
    Case("prepare-misaligned", PREPARE, ["val.lc.norm.tok.de has 10 lines", "val.lc.norm.tok.en has 11",
                                          "line i of each must translate"], misaligned),
    Case("prepare-missing-split", PREPARE, ["data.data_dir", "test_2016_flickr", "point data.data_dir"],
         missing_split),
    Case("prepare-split-is-a-folder", PREPARE, ["val.lc.norm.tok.de", "cannot read", "data.data_dir"],
         split_is_a_folder),
    Case("eval-broken-data-cache", ["eval", "--checkpoint", "runs/mt", "--config", "mt.toml"],
         ["data cache is unreadable", "tmin data prepare --force"], broken_cache),
    Case("eval-truncated-test-file", ["eval", "--checkpoint", "runs/mt", "--config", "mt.toml"],
         ["test_2016_flickr.lc.norm.tok.en.gz", "truncated"],
         truncate(lambda t: t / data_file("test_2016_flickr", "en"), 0.5)),
]

ALL = CHECKPOINTS + RUN_DIRS + DATA_FILES


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_bad_file_input(case, workdir):
    proc = check_case(case, workdir)
    print(f"{case.id}: {proc.stderr.strip()}")  # the message, for reading with pytest -rP
    assert not (workdir / "PWNED").exists()  # no pickled code ever ran
    assert not Path("/tmp/tmin-abs-run").exists()
    assert not (workdir.parent / "escape").exists() and not (workdir.parent.parent / "x").exists()


def test_the_corpus_is_large_enough():
    assert len(ALL) >= 40 and len({c.id for c in ALL}) == len(ALL)


def test_eval_scores_a_split_with_an_overlong_sentence_and_names_it(workdir):
    """Not an error: a 10,000-token val sentence is named in a warning and scored as an empty line."""
    from tests.bad_input.harness import run_tmin

    pairs = make_pairs(10, 2)
    pairs[3] = (" ".join(["ein mann"] * 5000), "a man")
    write_split(workdir / "data" / "multi30k", "val", pairs, gz=False)
    proc = run_tmin(["eval", "--checkpoint", "runs/mt", "--config", "mt.toml", "--split", "val", "--beam", "1",
                     "--hyp-out", "hyp.txt"], workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "val: sentence 4 ('ein mann ein mann" in proc.stderr and "scored as an empty translation" in proc.stderr
    hyps = (workdir / "hyp.txt").read_text().split("\n")[:-1]
    assert len(hyps) == 10 and hyps[3] == ""  # before: the whole evaluation failed (sequence > model.max_len)
    assert '"sentences": 10' in (workdir / "hyp.txt.json").read_text()
