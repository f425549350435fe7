"""Bad inputs of issue 38, item 7: refusals that name the key and the source of its value, and the edges of
the run lock and of torchrun's variables.

Each case runs `tmin` in a fresh folder as a user would; `harness.check_case` holds the four rules (no
traceback, a non-zero exit, a message naming the key, the value's source and the fix, no existing file
changed). Here also nothing is left behind: a refused command creates no file, and the message never blames a
source the value did not come from (`absent`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_input.harness import Case, check_case, tree_digest
from tests.bad_input.test_file_inputs import _HOLD_LOCK as HOLD_LOCK

TINY = """[model]
d_model = 32
num_heads = 4
d_ff = 64
num_layers = 1
max_len = 64

[train]
task = "copy"
steps = 2
batch_tokens = 200
warmup_steps = 50
eval_interval = 1000
checkpoint_interval = 1
device = "cpu"
out_dir = "runs"
name = "copy"
"""
HOLDERS: list[subprocess.Popen] = []  # processes that hold a run's lock for a case; ended after each test


def files(contents: dict[str, str | None], links: dict[str, str] | None = None):
    """A setup writing each name -> text (None: a folder), then each symbolic link name -> target."""

    def setup(tmp: Path) -> None:
        for name, text in contents.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir() if text is None else path.write_text(text)
        for name, target in (links or {}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).symlink_to(target)

    return setup


def run_held_before_its_first_checkpoint(tmp: Path) -> None:
    """runs/copy as a tmin train leaves it before its first checkpoint: its config and a held .lock."""
    files({"copy.toml": TINY, "runs/copy/config.toml": TINY})(tmp)
    lock = tmp / "runs" / "copy" / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)])  # as a training tmin train holds it
    HOLDERS.append(holder)
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text() == str(holder.pid)):
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.05)


RELATIVE = ["--set", "model.positional=relative"]
TRAIN = ["train", "--config", "copy.toml"]
SOURCES = [
    Case("verify-set-relative-clip-over-config-toml",
         ["verify", "positional", *RELATIVE, "--set", "model.relative_clip=1000000000"],
         ["--set model.relative_clip=1000000000: model.relative_clip = 1,000,000,000", "fix: lower model.relative_clip"],
         files({"config.toml": "[verify]\nseed = 3\n"})),
    Case("verify-set-seq-len-over-config-toml", ["verify", "positional", "--set", "verify.seq_len=600"],
         ["--set verify.seq_len=600: verify.seq_len = 600", "model.max_len = 512", "fix: raise model.max_len"],
         files({"config.toml": "[verify]\nseed = 3\n"})),
    Case("verify-seq-len-in-config-toml", ["verify", "positional"],
         ["config.toml: verify.seq_len = 600", "fix: raise model.max_len"],
         files({"config.toml": "[verify]\nseq_len = 600\n"})),
    Case("verify-seq-len-in-the-file-tmin-config-names", ["verify", "positional"],
         ["mine.toml: verify.seq_len = 600", "fix: raise model.max_len"],
         files({"config.toml": "[verify]\nseed = 3\n", "mine.toml": "[verify]\nseq_len = 600\n"}),
         env={"TMIN_CONFIG": "mine.toml"}),
    Case("train-set-relative-clip-tables-too-large",
         [*TRAIN, *RELATIVE, "--set", "model.relative_clip=1000000", "--set", "train.batch_tokens=100000"],
         ["--set model.relative_clip=1000000: model.relative_clip = 1,000,000", "fix: lower model.relative_clip"],
         files({"copy.toml": TINY})),
    Case("train-relative-clip-in-config-toml",
         [*TRAIN, "--set", "train.batch_tokens=100000"],
         ["copy.toml: model.relative_clip = 1,000,000", "fix: lower model.relative_clip"],
         files({"copy.toml": TINY.replace("[model]\n", '[model]\npositional = "relative"\nrelative_clip = 1000000\n')})),
    Case("verify-set-relative-clip-zh",
         ["verify", "positional", *RELATIVE, "--set", "model.relative_clip=1000000000"],
         ["--set model.relative_clip=1000000000", "model.relative_clip", "修正"],
         files({"config.toml": "[verify]\nseed = 3\n"}), env={"LANG": "zh_CN.UTF-8"}),
]
LOCK = [
    Case("train-lock-is-a-folder", TRAIN, ["runs/copy/.lock is a folder", "fix: move that folder"],
         files({"copy.toml": TINY, "runs/copy/.lock": None})),
    Case("train-overwrite-lock-is-a-folder", [*TRAIN, "--overwrite"], ["runs/copy/.lock is a folder", "fix:"],
         files({"copy.toml": TINY, "runs/copy/.lock": None, "runs/copy/.lock/keep.txt": "mine\n"})),
    Case("train-lock-is-a-symlink-to-a-user-file", TRAIN,
         ["runs/copy/.lock is a symbolic link", "never written through", "fix: remove the link"],
         files({"copy.toml": TINY, "notes.txt": "the user's own notes\n"}, {"runs/copy/.lock": "../../notes.txt"})),
    Case("train-lock-is-a-dangling-symlink", TRAIN, ["runs/copy/.lock is a symbolic link", "fix: remove the link"],
         files({"copy.toml": TINY}, {"runs/copy/.lock": "../../made-by-tmin.txt"})),
    Case("train-lock-is-a-symlink-zh", TRAIN, ["runs/copy/.lock", "符号链接", "修正"],
         files({"copy.toml": TINY, "notes.txt": "the user's own notes\n"}, {"runs/copy/.lock": "../../notes.txt"}),
         env={"LANG": "zh_CN.UTF-8"}),
    Case("train-resume-held-before-its-first-checkpoint", ["train", "--resume", "runs/copy"],
         ["runs/copy is in use by another tmin train (process", "wait for it to finish"],
         run_held_before_its_first_checkpoint),
    Case("train-resume-checkpoint-of-a-held-run", ["train", "--resume", "runs/copy/checkpoints/step_0000001.pt"],
         ["runs/copy is in use by another tmin train (process", "wait for it to finish"],
         run_held_before_its_first_checkpoint),
]
TORCHRUN = [
    Case("train-world-size-not-a-number", TRAIN, ["WORLD_SIZE='two'", "fix: unset RANK, WORLD_SIZE", "torchrun"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "two"}),
    Case("train-world-size-zero", TRAIN, ["WORLD_SIZE='0'", "an integer from 1 up", "torchrun"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "0"}),
    Case("train-rank-negative", TRAIN, ["RANK='-1'", "[0, 2)", "torchrun"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "2", "RANK": "-1"}),
    Case("train-rank-not-below-world-size", TRAIN, ["RANK='2'", "[0, 2)", "torchrun"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "2", "RANK": "2"}),
    Case("train-rank-without-world-size", TRAIN, ["RANK='1'", "[0, 1)", "torchrun"],
         files({"copy.toml": TINY}), env={"RANK": "1"}),
    Case("train-local-rank-not-a-number", TRAIN, ["LOCAL_RANK='a'", "torchrun"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "a"}),
    Case("train-rank-zh", TRAIN, ["环境变量 RANK='-1'", "torchrun", "修正"],
         files({"copy.toml": TINY}), env={"WORLD_SIZE": "2", "RANK": "-1", "LANG": "zh_CN.UTF-8"}),
]
ALL = SOURCES + LOCK + TORCHRUN
# a source the value did not come from, never to be blamed
ABSENT = {"verify-set-relative-clip-over-config-toml": "config.toml:", "verify-set-seq-len-over-config-toml":
          "config.toml:", "train-set-relative-clip-tables-too-large": "lower train.batch_tokens",
          "train-relative-clip-in-config-toml": "lower train.batch_tokens"}


@pytest.fixture(autouse=True)
def end_holders():
    yield
    while HOLDERS:
        holder = HOLDERS.pop()
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_bad_input_names_its_source_and_leaves_nothing_behind(case, tmp_path):
    case.setup(tmp_path)
    before = tree_digest(tmp_path)
    proc = check_case(Case(case.id, case.args, case.expect, None, case.env), tmp_path)
    message = proc.stdout + proc.stderr
    print(f"{case.id}: {proc.stderr.strip()}")  # the message, for reading with pytest -rP
    assert case.id not in ABSENT or ABSENT[case.id] not in message, message
    assert tree_digest(tmp_path) == before  # no run folder, no .lock, no file made where a link pointed
    assert not (tmp_path / "made-by-tmin.txt").exists()


def test_the_cases_are_many_and_named_once():
    assert len(ALL) >= 20 and len({c.id for c in ALL}) == len(ALL)
