"""The one atomic writer (transformer_min.core.io): usual file modes, no temp file left, old file kept on failure."""

import os
import stat

import pytest

from transformer_min.core.io import TMP_RE, atomic_write, atomic_write_text, remove_stale_temp_files


@pytest.fixture
def umask():
    """Set a umask for the test, then put the old one back."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_files_get_the_mode_open_would_give(tmp_path, umask, mask, expected):
    umask(mask)
    atomic_write_text(tmp_path / "a.txt", "x")
    with open(tmp_path / "plain.txt", "w") as f:  # the independent reference: what open() gives
        f.write("x")
    assert _mode(tmp_path / "a.txt") == expected == _mode(tmp_path / "plain.txt")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("old")

    def boom(tmp):
        open(tmp, "w").write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["keep.txt"]


def test_stale_temp_files_are_recognised_and_removed(tmp_path):
    (tmp_path / ".step_0000003.pt.k2j4_x9.tmp").write_bytes(b"partial")
    (tmp_path / "step_0000003.pt").write_bytes(b"whole")
    (tmp_path / "notes.tmp").write_text("user file")  # not ours: no leading dot and random part
    removed = remove_stale_temp_files(tmp_path)
    assert [p.name for p in removed] == [".step_0000003.pt.k2j4_x9.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["notes.tmp", "step_0000003.pt"]
    assert TMP_RE.match(".metrics.jsonl.abc.tmp") and not TMP_RE.match("step_1.pt")


def test_training_run_files_have_the_usual_mode(tmp_path, umask):
    """Checkpoints, metrics, config and the plot of a run: 0644 under umask 022 (were 0600)."""
    from tests.training.conftest import tiny_config
    from transformer_min.cli.train import train

    umask(0o022)
    _, run_dir = train(tiny_config(tmp_path, steps=3, checkpoint_interval=3))
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"config.toml", "metrics.jsonl", "metrics.png", "step_0000003.pt"} <= names
    assert {p.name: oct(_mode(p)) for p in files} == {p.name: oct(0o644) for p in files}
