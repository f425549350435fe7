"""SIGKILL at random points of a CI-sized training run (issue 13): after every kill the run still
decodes and resumes, every checkpoint left is whole, and no temporary file survives a resume."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.training.test_distributed import TINY_TOML
from transformer_min.model import saved as ckpt

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 5


def _launch(args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMIN_", "WORLD_SIZE", "RANK"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, "-m", "transformer_min", "train", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _newest_step(run):
    names = [p.name for p in ckpt.list_checkpoints(run)]
    return names[-1] if names else None


def _temp_files(run):
    return [p for p in run.rglob("*") if p.name.endswith(".tmp")]


def _kill_after_progress(proc, run, rng, mid_save):
    """Wait until the run has written a checkpoint newer than the one it started from, then SIGKILL it:
    after a random delay, or (mid_save) as soon as a save's temporary file appears."""
    start, deadline = _newest_step(run), time.monotonic() + 60
    while _newest_step(run) == start:
        assert proc.poll() is None, f"training ended early: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 60 s"
        time.sleep(0.02)
    if mid_save:
        while not _temp_files(run) and time.monotonic() < deadline:
            time.sleep(0.001)
    else:
        time.sleep(rng.uniform(0.0, 0.6))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_random_kills_leave_a_run_that_decodes_and_resumes(tmp_path, capsys, restore_logging):
    from transformer_min.cli.main import main
    from transformer_min.cli.train import train

    (tmp_path / "tiny.toml").write_text(TINY_TOML.replace("checkpoint_interval = 2", "checkpoint_interval = 1"))
    run = tmp_path / "k"
    rng = random.Random(13)
    first = ["--config", "tiny.toml", "--name", "k", "--out-dir", str(tmp_path), "--steps", "100000"]
    cut_saves = 0
    for trial in range(TRIALS):
        proc = _launch(first if trial == 0 else ["--resume", str(run), "--steps", "100000"], tmp_path)
        _kill_after_progress(proc, run, rng, mid_save=trial % 2 == 1)
        cut_saves += bool(_temp_files(run))
        for p in ckpt.list_checkpoints(run):  # atomic writes: whatever is there is whole
            assert ckpt.read_checkpoint(p)["step"] == int(p.stem.split("_")[1]), (trial, p)

        assert main(["decode", "--checkpoint", str(run), "3 5 7 9"]) == 0, trial
        assert capsys.readouterr().out.strip(), trial
        step = ckpt.read_checkpoint(run)["step"]
        result, _ = train(None, resume=str(run), steps=step + 1)
        assert result.step == step + 1, trial
        assert not _temp_files(run), (trial, _temp_files(run))
    assert cut_saves >= 1  # at least one kill did cut a save short (the mid_save trials aim for that)
