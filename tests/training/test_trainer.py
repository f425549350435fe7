"""The training loop: exact resume, run directory contents, Ctrl-C, learning on the copy task."""

import json

import pytest
import torch

from transformer_min.model import saved as ckpt
from transformer_min.translation import synthetic as tasks
from transformer_min.cli.train import train
from transformer_min.translation.synthetic import SyntheticEvaluator, synthetic_accuracy


def _losses(run_dir):
    return [r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_resume_continues_exactly(make_config, tmp_path):
    straight, _ = train(make_config(name="straight", steps=6))
    half, run_dir = train(make_config(name="resumed", steps=3))
    assert half.step == 3
    resumed, _ = train(None, resume=str(run_dir), steps=6)
    assert resumed.step == 6
    a, b = _losses(tmp_path / "straight"), _losses(tmp_path / "resumed")
    assert len(a) == len(b) == 6
    assert a == pytest.approx(b, abs=1e-6)  # same RNG state, same data order
    wa = ckpt.read_checkpoint(tmp_path / "straight")["model"]
    wb = ckpt.read_checkpoint(tmp_path / "resumed")["model"]
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_run_directory_holds_config_metrics_plot_and_checkpoints(make_config, tmp_path):
    result, run_dir = train(make_config(steps=4, checkpoint_interval=2, keep_last=1))
    assert (run_dir / "config.toml").read_text().count("[model]") == 1
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = recs[0]  # what the run ran on (issue 12): the precision actually used, threads, the CPU
    assert start["event"] == "start" and start["step"] == 0 and start["precision"] == "fp32"
    assert start["threads"] == torch.get_num_threads() and start["cpu_capability"] and start["device"] == "cpu"
    assert {"step", "loss", "lr", "tokens_per_s"} <= set(recs[1])
    assert recs[-1].get("final_accuracy") is not None
    assert (run_dir / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_0000004.pt"]  # keep_last = 1
    from transformer_min.core.project import load_project

    assert load_project(run_dir / "config.toml", quiet=True).config.model.d_model == 32  # the resolved config reloads


class _Interrupting(tasks.SyntheticTask):
    def __init__(self, *a, stop_at, **k):
        super().__init__(*a, **k)
        self.calls, self.stop_at = 0, stop_at

    def next_batch(self):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return super().next_batch()


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(make_config, monkeypatch):
    cfg = make_config(steps=50, checkpoint_interval=100)
    monkeypatch.setattr(tasks, "SyntheticTask",
                        lambda task, bt, seed, rank=0: _Interrupting(task, bt, seed, rank, stop_at=4))
    result, run_dir = train(cfg)
    assert result.stopped == "interrupted" and result.step == 3
    state = ckpt.read_checkpoint(run_dir)
    assert state["step"] == 3 and state["optimizer"] is not None


def _logged_steps(run_dir):
    return [r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_ctrl_c_during_an_evaluation_keeps_that_steps_record(make_config, monkeypatch):
    """Step 3 has landed when its evaluation is cut: the checkpoint is step 3, so the log must hold step 3."""
    from transformer_min.training.hooks import Evaluation

    def cut(self, model, final, is_main, autocast):
        raise KeyboardInterrupt

    monkeypatch.setattr(Evaluation, "run", cut)
    result, run_dir = train(make_config(steps=50, eval_interval=3, checkpoint_interval=100))
    assert result.stopped == "interrupted" and result.step == 3
    assert ckpt.read_checkpoint(run_dir)["step"] == 3
    assert _logged_steps(run_dir) == [1, 2, 3]


def test_ctrl_c_right_after_the_optimizer_update_waits_for_the_step_to_land(make_config, monkeypatch):
    """A real SIGINT sent just after Adam's 3rd update: the step counter, the schedule and the log follow that
    update before the interrupt is taken, so the checkpoint's Adam state, schedule and step agree."""
    import os
    import signal

    real_step, calls, handlers = torch.optim.Adam.step, [], []

    def step_then_ctrl_c(self, *a, **k):
        out = real_step(self, *a, **k)
        calls.append(1)
        if len(calls) == 3:
            handlers.append(signal.getsignal(signal.SIGINT))
            os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", step_then_ctrl_c)
    # a user's Ctrl-C meets Python's own handler; a test process may hold another (one full-suite run under
    # pytest-xdist saw the signal go nowhere), so this test sets Python's default for its duration
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result, run_dir = train(make_config(steps=50, checkpoint_interval=100))
    except KeyboardInterrupt:
        pytest.fail("the SIGINT escaped the training loop")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)  # None: not set from Python
    assert result.stopped == "interrupted" and result.step == 3, (result.stopped, len(calls), handlers)
    state = ckpt.read_checkpoint(run_dir)
    adam_steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert state["step"] == 3 and adam_steps == {3}
    assert state["scheduler"]["last_epoch"] == 3
    assert _logged_steps(run_dir) == [1, 2, 3]


def test_a_diverged_run_keeps_its_last_good_checkpoint(make_config):
    """lr 1e30: step 1 is finite, the loss of step 2 is not. Step 2's weights must not be saved, nor replace
    (keep_last = 1) the checkpoint of step 1, nor become best.pt."""
    result, run_dir = train(make_config(steps=10, lr_factor=1e30, checkpoint_interval=1, keep_last=1,
                                        eval_interval=1))
    assert result.stopped == "diverged" and result.step == 2
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_0000001.pt"]
    state = ckpt.read_checkpoint(run_dir)
    assert state["step"] == 1 and all(torch.isfinite(v).all() for v in state["model"].values())
    best = run_dir / "checkpoints" / "best.pt"
    if best.exists():
        assert all(torch.isfinite(v).all() for v in ckpt.read_checkpoint(best)["model"].values())


def test_copy_task_learns_ci_sized(tmp_path):
    """A CI-sized guard of the end-to-end check: greedy decoding of fresh sequences is right.

    400 updates, not 200: at 200 the run sat on a knife-edge (the key biases get gradients that are pure
    rounding noise, which Adam turns into full-size steps), so a change of float rounding alone (three Q/K/V
    matmuls instead of one fused) moved seed 7 from 0.98 to 0.49; at 400, seeds 1, 2 and 7 all reach 1.0."""
    from tests.training.conftest import tiny_config
    from transformer_min.core.config import ModelConfig
    import dataclasses

    cfg = tiny_config(tmp_path, steps=400, batch_tokens=1024, warmup_steps=100, lr_factor=0.5,
                      checkpoint_interval=1000, name="copy")
    cfg = dataclasses.replace(cfg, model=ModelConfig(d_model=64, num_heads=4, d_ff=256, num_layers=2,
                                                     dropout=0.0, max_len=64))
    result, run_dir = train(cfg)
    model, _ = ckpt.load_model(run_dir)
    acc = synthetic_accuracy(model, "copy", 300, seed=99, device="cpu")
    assert acc >= 0.9, f"copy accuracy {acc:.3f} after {result.step} steps"


def test_evaluator_scores_a_perfect_oracle_as_one():
    class Oracle(torch.nn.Module):
        """Not a Transformer: checks the evaluator's bookkeeping with a model that copies exactly."""

    ev = SyntheticEvaluator("reverse", 1, "cpu", n_during=5)
    assert ev.n_final == 1000 and ev.task == "reverse"
    pairs = tasks.eval_set("reverse", 5, 1)
    assert all(t == list(reversed(s)) and 1 <= len(s) <= 10 for s, t in pairs)
    assert all(3 <= x <= 10 for s, _ in pairs for x in s)


def test_progress_bar_is_off_when_not_a_terminal(monkeypatch):
    import io
    import sys

    from transformer_min.training.hooks import progress_bar

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a tty
    assert progress_bar(10, 0, enabled=True) is None
