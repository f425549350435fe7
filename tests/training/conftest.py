import pytest

from transformer_min.core.config import Config, ModelConfig, TrainConfig, VocabConfig


def tiny_config(tmp_path, **train) -> Config:
    """A seeded tiny config for the synthetic copy task (d_model 32, 2 layers, 4 heads)."""
    t = dict(task="copy", steps=6, batch_tokens=200, warmup_steps=50, eval_interval=1000,
             checkpoint_interval=3, out_dir=str(tmp_path), name="tiny", seed=7, device="cpu",
             precision="fp32")  # machine-independent; "auto" is tested with mocked probes
    t.update(train)
    return Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.1, max_len=64),
                  vocab=VocabConfig(src_size=11, tgt_size=11), train=TrainConfig(**t))


@pytest.fixture
def make_config(tmp_path):
    return lambda **train: tiny_config(tmp_path, **train)


def tiny_model_and_config():
    """A dropout-free tiny float64 model (same seed everywhere) for the DDP and accumulation
    equivalences. float64, because Adam's first step is lr * g / |g|: in float32 a gradient that is
    rounding noise can flip sign between summation orders and move a weight by up to lr."""
    import dataclasses

    import torch

    from transformer_min.model.transformer import build_model

    cfg = tiny_config("/tmp", steps=1)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.0))
    torch.manual_seed(0)
    return build_model(cfg).double(), cfg


def fixed_batch():
    """A deterministic copy-task batch of 8 sequences."""
    import torch

    from transformer_min.translation import synthetic as tasks

    g = torch.Generator().manual_seed(5)
    seqs = tasks.sample_sequences(8, g)
    from transformer_min.data.batch import make_batch

    return make_batch([(s, s) for s in seqs], tasks.BOS_ID, tasks.EOS_ID, tasks.PAD_ID)
