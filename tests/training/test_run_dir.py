"""The run directory never loses a run: names stay inside out_dir, an existing run is not overwritten
(unless --overwrite), killed saves' temp files are removed, config.toml edits are not silently lost,
and a damaged newest checkpoint resumes from the previous one."""

import hashlib
import json
import logging

import pytest

from transformer_min.core.errors import CheckpointError, ConfigError
from transformer_min.model import saved as ckpt
from transformer_min.cli.train import train


def _digest(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["../../x", "../sibling", "/tmp/abs_run", ".", "a/../..", "a/../../b"])
def test_a_name_that_leaves_out_dir_is_refused(make_config, tmp_path, name):
    out = tmp_path / "deep" / "runs"
    with pytest.raises(ConfigError, match=r"train\.name \(--name\).*leaves train\.out_dir"):
        train(make_config(name=name, out_dir=str(out)))
    assert not (tmp_path / "x").exists() and not (tmp_path / "deep" / "sibling").exists()
    assert not out.exists()  # nothing was written anywhere


def test_a_symlink_out_of_out_dir_is_refused(make_config, tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="leaves train.out_dir"):
        train(make_config(name="link/x", out_dir=str(tmp_path / "runs")))


def test_a_nested_name_inside_out_dir_is_fine(make_config, tmp_path):
    _, run_dir = train(make_config(name="group/run1", steps=1, checkpoint_interval=1))
    assert run_dir == tmp_path / "group" / "run1" and ckpt.list_checkpoints(run_dir)


def test_an_existing_run_is_refused_untouched_and_replaced_only_with_overwrite(make_config, tmp_path):
    _, run_dir = train(make_config(steps=6, checkpoint_interval=3))
    before = _digest(run_dir)
    assert "metrics.jsonl" in before and "checkpoints/step_0000006.pt" in before
    with pytest.raises(ConfigError) as e:
        train(make_config(steps=2, checkpoint_interval=1, seed=99))
    msg = str(e.value)
    assert str(run_dir) in msg and "already holds a run" in msg
    assert f"--resume {run_dir}" in msg and "--name" in msg and "--overwrite" in msg
    assert _digest(run_dir) == before  # nothing of the old run changed

    result, _ = train(make_config(steps=2, checkpoint_interval=1, seed=99), overwrite=True)
    assert result.step == 2
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_0000001.pt", "step_0000002.pt"]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 2  # no record of the old run's steps 3..6 left


def test_temp_files_of_a_killed_save_are_removed_on_resume_and_on_start(make_config, tmp_path):
    _, run_dir = train(make_config(steps=3, checkpoint_interval=3))
    stale = [run_dir / "checkpoints" / ".step_0000006.pt.ab12cd_e.tmp", run_dir / ".metrics.png.x9y8z7.tmp"]
    for p in stale:
        p.write_bytes(b"partial")
    train(None, resume=str(run_dir), steps=4)
    assert not any(p.exists() for p in stale)
    assert not list(run_dir.rglob("*.tmp"))

    fresh = tmp_path / "fresh" / "checkpoints"  # a first save killed: only a temp file exists
    fresh.mkdir(parents=True)
    (fresh / ".step_0000003.pt.qq11ww.tmp").write_bytes(b"partial")
    train(make_config(name="fresh", steps=1, checkpoint_interval=1))
    assert not list((tmp_path / "fresh").rglob("*.tmp"))


def test_resume_refuses_an_edited_config_naming_the_field(make_config, tmp_path):
    _, run_dir = train(make_config(steps=3, checkpoint_interval=3))
    cfg_file = run_dir / "config.toml"
    cfg_file.write_text(cfg_file.read_text().replace("lr_factor = 1.0", "lr_factor = 0.5"))
    before = _digest(run_dir)
    with pytest.raises(ConfigError) as e:
        train(None, resume=str(run_dir), steps=5)
    msg = str(e.value)
    assert "train.lr_factor (file 0.5, checkpoint 1.0)" in msg and str(cfg_file) in msg
    assert "--config" in msg and "undo it" in msg
    assert _digest(run_dir) == before  # the edit is still there


def test_resume_uses_an_edited_step_count(make_config):
    _, run_dir = train(make_config(steps=3, checkpoint_interval=3))
    cfg_file = run_dir / "config.toml"
    cfg_file.write_text(cfg_file.read_text().replace("steps = 3\n", "steps = 5\n"))
    result, _ = train(None, resume=str(run_dir))
    assert result.step == 5 and "steps = 5\n" in cfg_file.read_text()
    result, _ = train(None, resume=str(run_dir), steps=6)  # the command line wins over the file
    assert result.step == 6 and "steps = 6\n" in cfg_file.read_text()


def test_resume_with_a_truncated_newest_checkpoint_uses_the_previous_one(make_config, tmp_path, caplog):
    _, run_dir = train(make_config(steps=6, checkpoint_interval=3))
    newest = run_dir / "checkpoints" / "step_0000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    with caplog.at_level(logging.WARNING):
        result, _ = train(None, resume=str(run_dir), steps=8)
    assert result.step == 8
    assert "step_0000006.pt" in caplog.text and "truncated or damaged" in caplog.text
    assert "previous checkpoint" in caplog.text and "step_0000003.pt" in caplog.text
    assert ckpt.read_checkpoint(newest)["step"] == 6  # rewritten whole on the way to step 8


def test_resume_of_a_run_without_a_checkpoint_points_to_overwrite(make_config, tmp_path):
    run_dir = tmp_path / "early"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text("[train]\nsteps = 3\n")
    with pytest.raises(CheckpointError, match="before its first checkpoint.*--overwrite"):
        train(None, resume=str(run_dir))
    with pytest.raises(CheckpointError, match="no such run directory"):
        train(None, resume=str(tmp_path / "nope"))


def test_the_log_is_on_disk_before_each_checkpoint_is_written(make_config, monkeypatch):
    """A kill between the two must never leave a checkpoint ahead of metrics.jsonl (a resume then misses
    those steps' records for good): at every save the file on disk already holds the step being saved,
    and was fsynced (checkpoints are), not only handed to the OS."""
    from transformer_min.training import metrics as metrics_mod
    from transformer_min.training.snapshot import Checkpointing

    synced, seen = [], []
    real_fsync, real_save = metrics_mod.os.fsync, Checkpointing.save
    monkeypatch.setattr(metrics_mod.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])

    def save(self, trainer, name=None):
        if name is None:  # a step checkpoint
            on_disk = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
            seen.append((trainer.step, max(r["step"] for r in on_disk if "loss" in r), len(synced)))
        return real_save(self, trainer, name)

    monkeypatch.setattr(Checkpointing, "save", save)
    train(make_config(steps=6, checkpoint_interval=2))
    assert [s for s, _, _ in seen] == [2, 4, 6, 6]  # every 2 steps, and once more at the end
    assert all(logged == step for step, logged, _ in seen), seen
    counts = [0] + [n for _, _, n in seen]
    assert all(a < b for a, b in zip(counts, counts[1:])), counts  # a new fsync before each save


_TRAIN_FOREVER = """
import sys
from tests.training.conftest import tiny_config
from transformer_min.cli.train import train
train(tiny_config(sys.argv[1], steps=10**6, checkpoint_interval=1))
"""


def test_a_second_train_of_a_run_still_training_is_refused_and_changes_nothing(make_config, tmp_path):
    """Two processes writing one run directory interleave checkpoints and log (a --resume started while the
    first run still trains): the second is refused, names the first one's process and changes nothing;
    once the first is gone (even by kill -9, which leaves no chance to clean up) the resume goes on."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen([sys.executable, "-c", _TRAIN_FOREVER, str(tmp_path)], cwd=root,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=out, stderr=out)
    run_dir = tmp_path / "tiny"
    try:
        deadline = time.monotonic() + 120
        while len(ckpt.list_checkpoints(run_dir)) < 2:  # it trains, and has checkpoints to resume from
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the first run wrote no checkpoint in 120 s"
            time.sleep(0.2)
        first.send_signal(signal.SIGSTOP)  # frozen mid-run: its files stay as they are while we look
        before = _digest(run_dir)
        last = int(ckpt.CKPT_RE.match(ckpt.latest_checkpoint(run_dir).name).group(1))
        for attempt in (lambda: train(None, resume=str(run_dir), steps=last + 1),  # bounded, should it run
                        lambda: train(make_config(steps=2, checkpoint_interval=1), overwrite=True)):
            with pytest.raises(ConfigError) as e:
                attempt()
            msg = str(e.value)
            assert f"{run_dir} is in use by another tmin train (process {first.pid})" in msg
            assert "nothing was changed" in msg and "run this again" in msg
            assert _digest(run_dir) == before
    finally:
        first.kill()
        first.wait()
    result, _ = train(None, resume=str(run_dir), steps=last + 1)  # stopped, then killed: no later checkpoint
    assert result.stopped == "steps"
