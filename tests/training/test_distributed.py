"""Outgrowing one process: DDP through torchrun (gloo, 2 processes started by the test) equals one
process on the whole batch; gradient accumulation equals one step on the union; a DDP checkpoint
loads in a single process."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.training.conftest import fixed_batch, tiny_model_and_config
from transformer_min.data.batch import Batch
from transformer_min.training.trainer import Trainer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    env.pop("WORLD_SIZE", None)
    return env


def _single_step(batches):
    model, cfg = tiny_model_and_config()
    trainer = Trainer(cfg, model, source=None, run_dir=Path("/tmp"), device=torch.device("cpu"))
    trainer.train_step(batches)
    return trainer.model.state_dict()


def _torchrun(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_ddp_step_equals_single_process_on_whole_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    proc = _torchrun(str(HERE / "ddp_worker.py"), str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ddp = torch.load(out, weights_only=True)
    single = _single_step([fixed_batch()])
    assert set(ddp) == set(single)  # no "module." prefixes
    worst = max((ddp[k] - single[k]).abs().max().item() for k in single)
    assert worst < 1e-6, worst
    untouched = _single_step([])  # sanity: the step changed the weights
    assert max((untouched[k] - single[k]).abs().max().item() for k in single) > 1e-4


def test_accumulation_equals_one_step_on_the_union():
    b = fixed_batch()
    first = Batch(b.src[:3], b.tgt_in[:3], b.tgt_out[:3])  # unequal halves: normalisation by tokens
    second = Batch(b.src[3:], b.tgt_in[3:], b.tgt_out[3:])
    accumulated, union = _single_step([first, second]), _single_step([b])
    assert max((accumulated[k] - union[k]).abs().max().item() for k in union) < 1e-6


def test_torchrun_training_writes_once_and_loads_in_one_process(tmp_path):
    proc = _torchrun("-m", "transformer_min", "train", "--task", "copy", "--steps", "4", "--name", "ddp",
                     "--out-dir", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "ddp"
    from transformer_min.model import saved as ckpt

    state = ckpt.read_checkpoint(run)
    assert state["extra"]["world_size"] == 2
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])
    model, cfg = ckpt.load_model(run)  # single process, no DDP
    assert cfg.train.task == "copy"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert sum('"step": 1,' in x for x in lines) == 1  # only rank 0 writes
    # resume with another world size (1 process) continues from step 4
    from transformer_min.cli.train import train

    result, _ = train(None, resume=str(run), steps=6)
    assert result.step == 6


def test_torchrun_time_budget_stops_every_rank_together(tmp_path):
    """Ranks measure their own time; the stop is rank 0's decision, so no rank is left waiting."""
    proc = _torchrun("-m", "transformer_min", "train", "--task", "copy", "--steps", "1000", "--name", "budget",
                     "--out-dir", str(tmp_path), "--device", "cpu", "--time-budget", "0.001", timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(time)" in proc.stdout


TINY_TOML = """
[model]
d_model = 32
num_heads = 4
d_ff = 64
num_layers = 2
dropout = 0.1
max_len = 64

[vocab]
src_size = 11
tgt_size = 11

[train]
task = "copy"
batch_tokens = 200
warmup_steps = 50
eval_interval = 1000
checkpoint_interval = 2
seed = 7
device = "cpu"
"""


def test_torchrun_resume_at_the_same_world_size_continues_every_ranks_own_stream(tmp_path):
    """2 processes -> 2 processes: each rank resumes its own batches and dropout RNG, so 2 + 2 steps
    give the weights of 4 straight steps. (Before, every rank loaded rank 0's data state: rank 1
    replayed rank 0's batches and the weights differed.)"""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    common = ["-m", "transformer_min", "train", "--config", str(config), "--out-dir", str(tmp_path)]
    for args in (["--name", "straight", "--steps", "4"], ["--name", "resumed", "--steps", "2"]):
        proc = _torchrun(*common, *args)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _torchrun("-m", "transformer_min", "train", "--resume", str(tmp_path / "resumed"), "--steps", "4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "restarts per shard" not in proc.stderr  # same world size: no reshard
    from transformer_min.model import saved as ckpt

    straight = ckpt.read_checkpoint(tmp_path / "straight")
    resumed = ckpt.read_checkpoint(tmp_path / "resumed")
    assert straight["step"] == resumed["step"] == 4
    worst = max((straight["model"][k] - resumed["model"][k]).abs().max().item() for k in straight["model"])
    assert worst < 1e-6, worst
    half = ckpt.read_checkpoint(tmp_path / "resumed" / "checkpoints" / "step_0000002.pt")
    assert max((straight["model"][k] - half["model"][k]).abs().max().item() for k in half["model"]) > 1e-4
    assert len(half["ranks"]) == 2
    g0, g1 = (r["data"]["generator"] for r in half["ranks"])
    assert not torch.equal(g0, g1)  # two different streams were saved


def test_reshard_keeps_rank_0s_stream_and_gives_other_ranks_their_own():
    """Resuming on more processes than saved (only rank 0's state to go on): ranks must not repeat
    each other's batches."""
    from transformer_min.translation.synthetic import SyntheticTask

    saved = SyntheticTask("copy", 100, seed=3)
    saved.next_batch()
    state = saved.state_dict()
    expected = SyntheticTask("copy", 100, seed=3)
    expected.load_state_dict(state)
    r0, r1 = SyntheticTask("copy", 100, seed=3, rank=0), SyntheticTask("copy", 100, seed=3, rank=1)
    for r in (r0, r1):
        r.load_state_dict({**state, "reshard": True})
    b0, b1, want = r0.next_batch(), r1.next_batch(), expected.next_batch()
    assert torch.equal(b0.src, want.src)
    assert b0.src.shape != b1.src.shape or not torch.equal(b0.src, b1.src)
