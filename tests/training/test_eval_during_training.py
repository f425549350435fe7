"""Issue 23: the evaluation during training decodes the weights being trained.

Fused Adam writes the parameters in place without bumping torch's version counter, so a cache of the
inference step's weights keyed on (data_ptr, _version) made every evaluation after the first decode the
first one's weights: the logged accuracy/BLEU, best.pt and patience were wrong. Here every in-training
evaluation (as metrics.jsonl logs it) must EXACTLY equal the same evaluation of the checkpoint saved at that
step, reloaded into a fresh model in a fresh evaluator (fp32), with fused and with unfused Adam, for the copy
task, a tiny translation task and under torchrun with 2 processes; best.pt must hold the best step.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.data.conftest import corpus, data_config  # noqa: F401  (fixtures: the small parallel corpus)
from tests.training.conftest import tiny_config
from transformer_min.core.distributed import DistInfo
from transformer_min.core.special_tokens import BOS_ID, EOS_ID, PAD_ID
from transformer_min.data.batch import pad_sequences
from transformer_min.translation.synthetic import SyntheticEvaluator, eval_set, synthetic_accuracy, synthetic_task
from transformer_min.decoding.search import greedy_search, inference_weights, make_stepper, max_output_lengths
from transformer_min.model import saved
from transformer_min.model.transformer import build_model
from transformer_min.training import optim, run, trainer as trainer_module
from transformer_min.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
N_EVAL = 100  # sequences per copy-task evaluation (the shipped evaluator takes 200 during training)


@pytest.fixture(params=[True, False], ids=["fused-adam", "unfused-adam"])
def adam(request, monkeypatch):
    """The trainer's real optimizer (training.optim.build_optimizer), fused or not; asserts which it got."""
    real, made = optim.build_optimizer, []

    def build(model, *args, **kw):
        opt = real(model, *args, **kw, fused=request.param)
        made.append(opt)
        return opt

    monkeypatch.setattr(trainer_module, "build_optimizer", build)
    yield request.param
    assert made and all(bool(o.defaults.get("fused")) is request.param for o in made)


def logged_evaluations(run_dir: Path) -> dict[int, dict]:
    """step -> the eval_* values metrics.jsonl holds for the evaluations during training."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "eval_score" in rec:
            out[rec["step"]] = {k.removeprefix("eval_"): v for k, v in rec.items() if k.startswith("eval_")}
    return out


def checkpoint_at(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:07d}.pt"


def final_score(run_dir: Path) -> tuple[int, float]:
    """(step, score) of the evaluation at the end (it may save best.pt too), from metrics.jsonl's last record."""
    rec = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    return rec["step"], rec["final_score"]


def assert_best_pt_holds_the_best_step(run_dir: Path, logged: dict[int, dict]) -> None:
    """best.pt = the step checkpoint of the first evaluation with the best score (a later one must beat it)."""
    order = [(s, logged[s]["score"]) for s in sorted(logged)] + [final_score(run_dir)]
    best_step, best_score = order[0]
    for step, score in order[1:]:
        if score > best_score:
            best_step, best_score = step, score
    best = saved.read_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert best["step"] == best_step and best["extra"]["best_score"] == best_score, (best["step"], order)
    at_step = saved.read_checkpoint(checkpoint_at(run_dir, best_step))
    assert all(torch.equal(best["model"][k], at_step["model"][k]) for k in at_step["model"])


def copy_task(cfg, dist, device, run_dir):
    """The copy task as `tmin train` builds it, with N_EVAL sequences per evaluation (to stay fast)."""
    setup = synthetic_task(cfg, dist, device, run_dir)
    setup.evaluate = SyntheticEvaluator(cfg.train.task, cfg.train.seed, device, n_during=N_EVAL, n_final=N_EVAL)
    return setup


def test_copy_task_every_evaluation_equals_its_checkpoint_reloaded(tmp_path, adam):
    torch.manual_seed(0)
    cfg = tiny_config(tmp_path, steps=60, eval_interval=15, checkpoint_interval=15, keep_last=100,
                      warmup_steps=30, batch_tokens=400)
    _, run_dir = run.train(cfg, copy_task)
    logged = logged_evaluations(run_dir)
    assert sorted(logged) == [15, 30, 45, 60]
    scores = [logged[s]["accuracy"] for s in sorted(logged)]
    assert len(set(scores)) > 1, scores  # the model learns between evaluations: a stale one would show
    for step, got in logged.items():
        model, ccfg = saved.load_model(checkpoint_at(run_dir, step))
        again = synthetic_accuracy(model, "copy", N_EVAL, ccfg.train.seed, "cpu")
        assert got["accuracy"] == again, (step, got, again)
    assert_best_pt_holds_the_best_step(run_dir, logged)


def test_translation_every_evaluation_equals_its_checkpoint_reloaded(data_config, adam):
    from transformer_min.cli.train import make_task
    from transformer_min.data.pipeline import prepare
    from transformer_min.translation.evaluate import TranslationEvaluator

    torch.manual_seed(0)
    # an epoch of the small corpus is 9 updates, and an evaluation also runs at each epoch's end
    cfg = data_config(steps=36, eval_interval=9, checkpoint_interval=9, keep_last=100, precision="fp32")
    _, run_dir = run.train(cfg, make_task)
    logged = logged_evaluations(run_dir)
    assert len(logged) >= 4 and all(checkpoint_at(run_dir, s).is_file() for s in logged), sorted(logged)
    assert len({logged[s]["val_bleu"] for s in logged}) > 1, logged  # BLEU moves between evaluations
    for step, got in logged.items():
        model, ccfg = saved.load_model(checkpoint_at(run_dir, step))
        again = TranslationEvaluator(ccfg, prepare(ccfg), "cpu")(model, final=False)
        assert got["val_bleu"] == again["val_bleu"] and got["val_nll"] == again["val_nll"], (step, got, again)
    assert_best_pt_holds_the_best_step(run_dir, logged)


class LogProbs:
    """An evaluator that also returns the per-step log-probabilities of greedy decoding, made as the shipped
    evaluators make them (inference_weights once, then the searches' stepper)."""

    def __init__(self, n: int = 8):
        pairs = eval_set("copy", n, 1)
        self.src = pad_sequences([s + [EOS_ID] for s, _ in pairs], PAD_ID)  # (n, S)

    def __call__(self, model, final: bool) -> dict:
        stepper = make_stepper(model, self.src, PAD_ID, 1, True, inference_weights(model))
        _, steps = greedy_search(stepper, self.src.size(0), BOS_ID, EOS_ID, PAD_ID,
                                 max_output_lengths(self.src, PAD_ID, 5), return_logprobs=True)
        return {"score": synthetic_accuracy(model, "copy", 20, 1, "cpu"), "log_probs": torch.stack(steps)}


def test_a_later_evaluation_decodes_the_weights_trained_since_the_first(tmp_path, adam):
    """Train, evaluate, train on, evaluate: the second evaluation equals a fresh model with the new weights,
    bit for bit, and differs from the first (the old cache returned the first one's weights here)."""
    torch.manual_seed(0)
    cfg = tiny_config(tmp_path, steps=20, warmup_steps=10)
    setup = synthetic_task(cfg, DistInfo(), torch.device("cpu"), tmp_path)
    trainer = Trainer(cfg, build_model(cfg), setup.source, tmp_path, torch.device("cpu"), evaluator=LogProbs())
    evaluations = []
    for _ in range(2):
        for _ in range(10):
            trainer.train_step([setup.source.next_batch()])
        evaluations.append(trainer.evaluate()["log_probs"])
    fresh = build_model(cfg)
    fresh.load_state_dict(trainer.model.state_dict())
    assert torch.equal(evaluations[1], LogProbs()(fresh.eval(), False)["log_probs"])
    assert not torch.equal(evaluations[0], evaluations[1])


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
batch_tokens = 400
warmup_steps = 30
eval_interval = 15
checkpoint_interval = 15
keep_last = 100
seed = 7
device = "cpu"
precision = "fp32"
"""


def test_torchrun_every_evaluation_equals_its_checkpoint_reloaded(tmp_path):
    """2 processes (gloo), DDP, the trainer's fused Adam: rank 0's evaluations are of the trained weights."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "transformer_min", "train", "--config", str(config), "--out-dir", str(tmp_path),
                           "--name", "ddp", "--steps", "45"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = tmp_path / "ddp"
    logged = logged_evaluations(run_dir)
    assert sorted(logged) == [15, 30, 45]
    assert len({logged[s]["accuracy"] for s in logged}) > 1, logged
    for step, got in logged.items():
        model, ccfg = saved.load_model(checkpoint_at(run_dir, step))
        assert saved.read_checkpoint(checkpoint_at(run_dir, step))["extra"]["world_size"] == 2
        again = synthetic_accuracy(model, "copy", 200, ccfg.train.seed, "cpu")  # the shipped evaluator's 200
        assert got["accuracy"] == again, (step, got, again)
    assert_best_pt_holds_the_best_step(run_dir, logged)
