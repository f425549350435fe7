"""Mixed precision on CPU: bf16 autocast tracks fp32; fp16 (autocast + GradScaler) stays finite."""

import dataclasses
import json


from transformer_min.training.run import train


def _final_losses(run_dir, n=5):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in recs if "loss" in r]
    return losses, sum(losses[-n:]) / n


def _cfg(make_config, name, precision):
    cfg = make_config(name=name, steps=50, batch_tokens=512, warmup_steps=30, lr_factor=0.5,
                      checkpoint_interval=1000, precision=precision)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.0))


def test_bf16_autocast_loss_within_2_percent_of_fp32(make_config):
    _, fp32_dir = train(_cfg(make_config, "fp32", "fp32"))
    _, bf16_dir = train(_cfg(make_config, "bf16", "bf16"))
    l32, m32 = _final_losses(fp32_dir)
    l16, m16 = _final_losses(bf16_dir)
    assert len(l32) == len(l16) == 50
    assert l32[-1] < l32[0] * 0.9  # it learned something
    assert abs(m16 - m32) / m32 < 0.02, (m16, m32)


def test_fp16_with_grad_scaler_keeps_the_loss_finite(make_config):
    import math

    result, run_dir = train(_cfg(make_config, "fp16", "fp16"))
    losses, _ = _final_losses(run_dir)
    assert result.stopped == "steps" and all(math.isfinite(x) for x in losses)
    from transformer_min.training import checkpoint as ckpt

    assert ckpt.read_checkpoint(run_dir)["scaler"] is not None  # the GradScaler state is saved
