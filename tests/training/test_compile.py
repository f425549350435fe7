"""--compile: torch.compile wraps the model for training; checkpoints load without it."""

from transformer_min.model import saved as ckpt
from transformer_min.cli.train import train


def test_compiled_training_saves_plain_checkpoints(make_config):
    result, run_dir = train(make_config(steps=2, compile=True, name="compiled"))
    assert result.step == 2
    state = ckpt.read_checkpoint(run_dir)
    assert not any("_orig_mod" in k or k.startswith("module.") for k in state["model"])
    model, cfg = ckpt.load_model(run_dir)  # a plain, uncompiled Transformer
    assert type(model).__name__ == "Transformer" and cfg.train.compile is True
