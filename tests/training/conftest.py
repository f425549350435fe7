import pytest

from transformer_min.config import Config, ModelConfig, TrainConfig, VocabConfig


def tiny_config(tmp_path, **train) -> Config:
    """A seeded tiny config for the synthetic copy task (d_model 32, 2 layers, 4 heads)."""
    t = dict(task="copy", steps=6, batch_tokens=200, warmup_steps=50, eval_interval=1000,
             checkpoint_interval=3, out_dir=str(tmp_path), name="tiny", seed=7, device="cpu")
    t.update(train)
    return Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.1, max_len=64),
                  vocab=VocabConfig(src_size=11, tgt_size=11), train=TrainConfig(**t))


@pytest.fixture
def make_config(tmp_path):
    return lambda **train: tiny_config(tmp_path, **train)
