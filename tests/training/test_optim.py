"""Section 5.3: Adam with beta1 0.9, beta2 0.98, eps 1e-9, read back from the optimizer."""

import torch

from transformer_min.core.config import Config
from transformer_min.training.optim import build_optimizer


def test_adam_hyperparameters_read_back():
    t = Config().train
    opt = build_optimizer(torch.nn.Linear(3, 3), t.betas, t.eps)
    g = opt.param_groups[0]
    assert isinstance(opt, torch.optim.Adam)
    assert g["betas"] == (0.9, 0.98) and g["eps"] == 1e-9 and g["weight_decay"] == 0.0
    assert t.warmup_steps == 4000 and t.label_smoothing == 0.1


def test_fused_and_default_adam_take_the_same_step():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    b.load_state_dict(a.state_dict())
    oa, ob = build_optimizer(a, fused=True), build_optimizer(b, fused=False)
    x = torch.randn(8, 4)
    for m, o in ((a, oa), (b, ob)):
        for g in o.param_groups:
            g["lr"] = 1e-3
        m(x).pow(2).sum().backward()
        o.step()
    assert torch.allclose(a.weight, b.weight, atol=1e-7)
