"""The fused generator + label-smoothed loss (model/generator_loss.py) against the paper path: the generator's
logits, then training.loss.label_smoothed_nll (section 5.4). Same loss, NLL, token count and gradients; the
model's forward(targets=) the same as logits + loss; a training run the same after real optimizer steps; and
a checkpoint from before train.loss_kernel resumes through the paper path it was trained with."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.training.conftest import fixed_batch, tiny_config, tiny_model_and_config
from transformer_min.model.generator_loss import chunk_rows, generator_loss
from transformer_min.model.saved import checkpoint_config
from transformer_min.training.loss import label_smoothed_nll
from transformer_min.training.trainer import Trainer


def _case(bias: bool, pad_id: int = 0, seed: int = 0, V: int = 37, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    B, T, D = 5, 7, 12
    h = torch.randn(B, T, D, generator=g, dtype=dtype, requires_grad=True)
    W = torch.randn(V, D, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=dtype, requires_grad=True) if bias else None
    y = torch.randint(0, V, (B, T), generator=g)
    y[0, 4:] = pad_id  # padded tails, and a pad in the middle
    y[3, 2] = pad_id
    return h, W, b, y


def _grads(loss, tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows", [1, 4, 1000])  # a row per chunk, chunks across sentences, one chunk
@pytest.mark.parametrize("pad_id", [0, 3])
def test_fused_loss_equals_logits_then_label_smoothed_nll(bias, eps, rows, pad_id):
    h, W, b, y = _case(bias, pad_id)
    logits = h @ W.t() + (b if b is not None else 0)  # (B, T, V)
    want, want_nll, want_n = label_smoothed_nll(logits, y, eps, pad_id)
    got, got_nll, got_n = generator_loss(h, W, b, y, eps, pad_id, rows=rows)
    assert got_n == want_n == int((y != pad_id).sum())
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_nll, want_nll, rtol=1e-12, atol=1e-12)
    assert not got_nll.requires_grad  # a number to log
    for a, e in zip(_grads(got, (h, W, b)), _grads(want, (h, W, b))):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12)


def test_fused_loss_passes_gradcheck():
    h, W, b, y = _case(bias=True, V=11)
    h, W, b = (t.detach()[:, :3].clone().requires_grad_() if t is h else t for t in (h, W, b))
    y = y[:, :3]
    assert torch.autograd.gradcheck(lambda h, W, b: generator_loss(h, W, b, y, 0.1, 0, rows=4)[0], (h, W, b))


def test_fused_loss_under_bf16_autocast_is_the_paper_path_under_it():
    h, W, _, y = _case(bias=False, dtype=torch.float32, V=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, _, _ = label_smoothed_nll(torch.nn.functional.linear(h, W), y, 0.1, 0)
        got, _, _ = generator_loss(h, W, None, y, 0.1, 0, rows=8)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-3, atol=1e-2)
    (gh, gw), (wh, ww) = _grads(got, (h, W)), _grads(want, (h, W))
    assert gh.dtype == h.dtype and gw.dtype == W.dtype
    for a, e in ((gh, wh), (gw, ww)):
        assert ((a - e).norm() / e.norm()).item() < 2e-2


def test_chunk_rows_bound_the_chunk_and_keep_a_minimum():
    assert chunk_rows(8000) == (8 << 20) // (4 * 8000)
    assert chunk_rows(10 ** 9) == 32 and chunk_rows(1) > 10 ** 6


def test_model_forward_with_targets_is_logits_then_loss():
    """The model's fused path (what tmin train takes) against its paper path, every parameter's gradient."""
    model, _ = tiny_model_and_config()  # float64, no dropout
    b = fixed_batch()
    logits = model(b.src, b.tgt_in)
    want, want_nll, n = label_smoothed_nll(logits, b.tgt_out, 0.1, model.pad_id)
    params = [p for p in model.parameters() if p.requires_grad]
    expected = torch.autograd.grad(want, params)
    got, got_nll, m = model(b.src, b.tgt_in, targets=b.tgt_out, label_smoothing=0.1)
    assert m == n
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(got_nll, want_nll, rtol=1e-12, atol=1e-10)
    for a, e in zip(torch.autograd.grad(got, params), expected):
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="return_attention"):
        model(b.src, b.tgt_in, True, targets=b.tgt_out)


def _train(kernel: str, steps: int = 4):
    model, cfg = tiny_model_and_config()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, loss_kernel=kernel))
    trainer = Trainer(cfg, model, source=None, run_dir=__import__("pathlib").Path("/tmp"),
                      device=torch.device("cpu"))
    assert trainer.fused_loss == (kernel == "fused")
    b = fixed_batch()
    records = [trainer.train_step([b]) for _ in range(steps)]
    return trainer.model.state_dict(), records


def test_training_with_the_fused_loss_follows_the_paper_path_after_real_optimizer_steps():
    fused, rec_f = _train("fused")
    paper, rec_p = _train("paper")
    for a, e in zip(rec_f, rec_p):
        assert a["loss"] == pytest.approx(e["loss"], rel=1e-9) and a["nll"] == pytest.approx(e["nll"], rel=1e-9)
    assert max((fused[k] - paper[k]).abs().max().item() for k in paper) < 1e-8
    start, _ = _train("paper", steps=0)
    assert max((start[k] - paper[k]).abs().max().item() for k in paper) > 1e-4  # the steps moved the weights


def test_a_checkpoint_from_before_loss_kernel_resumes_through_the_paper_path(tmp_path):
    from transformer_min.core.config import config_to_dict

    cfg = tiny_config(tmp_path)
    assert cfg.train.loss_kernel == "fused"  # the default
    old = config_to_dict(cfg)
    del old["train"]["loss_kernel"]  # as a checkpoint written before the key existed holds it
    assert checkpoint_config({"config": old, "path": "old.pt"}).train.loss_kernel == "paper"
    new = config_to_dict(cfg)
    assert checkpoint_config({"config": new, "path": "new.pt"}).train.loss_kernel == "fused"
