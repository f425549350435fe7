"""The trainer takes its task from the caller (training.task.Task): any object with batches, an evaluator
and vocabulary sizes trains; sizes the model cannot hold are refused; the metrics plot comes from memory."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from transformer_min.core.errors import ConfigError
from transformer_min.translation import synthetic as tasks
from transformer_min.training import run
from transformer_min.training.metrics import MetricsLog
from transformer_min.training.task import check_task_vocab

ROOT = Path(__file__).resolve().parents[2]


def test_any_task_object_trains_and_its_metrics_are_logged(make_config):
    """A task defined here (not in data or translation): the trainer only uses the protocol's fields."""
    seen = []

    def evaluate(model, final):
        seen.append(final)
        return {"answer": 42.0, "score": 0.5}

    def factory(cfg, dist, device, run_dir):
        return SimpleNamespace(source=tasks.SyntheticTask("reverse", 200, 1), evaluate=evaluate,
                               src_vocab_size=11, tgt_vocab_size=11)

    result, run_dir = run.train(make_config(steps=2, eval_interval=1, checkpoint_interval=2), factory)
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval_answer"] for r in recs if "eval_answer" in r] == [42.0, 42.0]  # steps 1 and 2
    assert recs[-1] == {"step": 2, "final_answer": 42.0, "final_score": 0.5}
    assert seen == [False, False, True] and result.best_score == 0.5


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_a_task_with_more_ids_than_the_model_is_refused_naming_the_field(make_config, side):
    sizes = {"src_vocab_size": 11, "tgt_vocab_size": 11, f"{side}_vocab_size": 12}
    with pytest.raises(ConfigError, match=rf"vocab\.{side}_size = 11, .* uses 12 ids; fix: set vocab\.{side}_size = 12"):
        check_task_vocab(make_config(), SimpleNamespace(**sizes))
    check_task_vocab(make_config(), SimpleNamespace(src_vocab_size=5, tgt_vocab_size=11))  # fewer is fine


def test_synthetic_task_ids_are_the_shared_special_tokens():
    from transformer_min.core.config import VocabConfig

    batch = tasks.SyntheticTask("copy", 100, seed=0).next_batch()
    assert (batch.tgt_in[:, 0] == 1).all()  # BOS 1 starts every shifted output (section 3.1)
    assert ((batch.tgt_out == 2).sum(1) == 1).all()  # one EOS 2 per target
    assert int(batch.src.max()) <= 10 and int(batch.src.min()) >= 0
    v = VocabConfig()
    assert (v.pad_id, v.bos_id, v.eos_id) == (tasks.PAD_ID, tasks.BOS_ID, tasks.EOS_ID) == (0, 1, 2)


def test_metrics_plot_is_drawn_from_memory_not_from_the_file(tmp_path):
    """The log is read once (the resume cut); after that the file may even be gone and the plot still has
    every step."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 5.0 - s, "lr": 1e-4 * s}) + "\n" for s in range(1, 6))
                    + '{"step": 6, "lo')  # records after the checkpoint, and a line cut by a kill
    log = MetricsLog(path, resume_step=3)
    assert [r["step"] for r in log.history] == [1, 2, 3]
    path.unlink()  # nothing can be re-read now
    log.write({"step": 4, "loss": 1.5, "lr": 4e-4, "tokens": 10})
    log.write({"step": 4, "final_accuracy": 1.0})  # not a step record: not plotted
    assert [r["step"] for r in log.history] == [1, 2, 3, 4]
    from transformer_min.training.metrics import plot_metrics

    out = plot_metrics(log.history, tmp_path / "metrics.png", "run")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log.close()


def test_plot_leaves_matplotlib_global_state_alone(tmp_path):
    """The object API: no backend switch (matplotlib.use) and no pyplot figure registry."""
    code = ("import matplotlib, sys; from pathlib import Path; before = matplotlib.rcParams['backend'];"
            "from transformer_min.training.metrics import plot_metrics;"
            f"plot_metrics([{{'step': 1, 'loss': 2.0, 'lr': 0.1}}], Path({str(tmp_path / 'm.png')!r}), 't');"
            "print(matplotlib.rcParams['backend'] == before, 'matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "svg", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
