"""Stage `training`: Adam, the eq. (3) learning rate (section 5.3) and label smoothing (section 5.4).

The training modules are imported inside the checks: a missing module is a FAIL row naming the
ImportError, never a crash of `tmin verify`.
"""

from __future__ import annotations

import torch

from transformer_min.core.config import TrainConfig
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("training", "Optimizer, learning rate, label smoothing", "5.3, 5.4"),)

# PAPER.md eq. (3) test vectors at d_model 512, warmup 4000: (step, lrate).
LR_TEST_VECTORS = [
    (1, 1.746928107421711e-07),
    (100, 1.746928107421711e-05),
    (4000, 6.987712429686843e-04),
    (10000, 4.4194173824159226e-04),
    (100000, 1.3975424859373687e-04),
]
BIG_PEAK = 4.941058844013092e-04  # d_model 1024 at step 4000


@register("training.lr_test_vectors", "training", "5.3, eq. (3)",
          "lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5) at the PAPER.md test steps, and the "
          "big model's peak 4.941058844013092e-04", "EXACT",
          "transformer_min.training.schedule.rate")
def lr_test_vectors(ctx: Context) -> Result:
    from transformer_min.training.schedule import rate

    lines, worst = [], 0.0
    for step, want in LR_TEST_VECTORS + [(4000, BIG_PEAK)]:
        d = 1024 if want == BIG_PEAK else 512
        got = rate(step, d, 4000)
        worst = max(worst, abs(got - want) / want)
        lines.append(tr("step {step}, d_model {d_model}: {got}   paper: {want}").format(
            step=f"{step:6d}", d_model=f"{d:4d}", got=f"{got:.16e}", want=f"{want:.16e}"))
    return Result(worst < 1e-12, tr("max relative error {worst}").format(worst=fmt(worst)), "< 1e-12", lines)


@register("training.lr_peak_at_warmup", "training", "5.3, eq. (3)",
          "the rate rises linearly for warmup_steps, peaks at step = warmup_steps, then decays as step^-0.5",
          "EXACT", "transformer_min.training.schedule.rate")
def lr_peak(ctx: Context) -> Result:
    from transformer_min.training.schedule import rate

    lines, peaks, ok = [], [], True
    for d, warmup in ((512, 4000), (512, 8000), (256, 4000)):
        steps = range(1, 3 * warmup + 1)
        values = [rate(s, d, warmup) for s in steps]
        peak = max(steps, key=lambda s: values[s - 1])
        linear = abs(rate(warmup // 2, d, warmup) / rate(warmup, d, warmup) - 0.5) < 1e-12
        decay = abs(rate(4 * warmup, d, warmup) / rate(warmup, d, warmup) - 0.5) < 1e-12
        ok &= peak == warmup and linear and decay
        peaks.append(peak)
        lines.append(tr("d_model {d_model}, warmup {warmup}: peak at step {peak} ({value}); half-way up at warmup/2: "
                        "{linear}; half-way down at 4 warmup: {decay}").format(
            d_model=d, warmup=warmup, peak=peak, value=f"{values[peak - 1]:.4e}", linear=linear, decay=decay))
    return Result(ok, "; ".join(f"peak {peak}" for peak in peaks),
                  tr("peak 4000; peak 8000; peak 4000"), lines)


@register("training.noam_scheduler_matches_eq3", "training", "5.3, eq. (3)",
          "the LambdaLR used in training sets the optimizer's lr to eq. (3) of the 1-based step", "EXACT",
          "transformer_min.training.schedule.noam_scheduler")
def scheduler(ctx: Context) -> Result:
    from transformer_min.training.schedule import noam_scheduler, rate

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=1.0)
    sched = noam_scheduler(opt, 512, 40)
    worst = 0.0
    for step in range(1, 121):  # the lr in effect for optimizer step `step`
        worst = max(worst, abs(opt.param_groups[0]["lr"] - rate(step, 512, 40)) / rate(step, 512, 40))
        opt.step()
        sched.step()
    return Result(worst < 1e-12, tr("max relative error {worst} over 120 steps (warmup 40)").format(worst=fmt(worst)), "< 1e-12")


@register("training.adam_hyperparameters", "training", "5.3",
          "Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (optimizer built for training, and the defaults)",
          "EXACT", "transformer_min.training.optim.build_optimizer")
def adam(ctx: Context) -> Result:
    from transformer_min.training.optim import build_optimizer

    t = TrainConfig()
    opt = build_optimizer(torch.nn.Linear(2, 2), betas=t.betas, eps=t.eps)
    g = opt.param_groups[0]
    got = (type(opt).__name__, tuple(g["betas"]), g["eps"], g["lr"])
    ok = got == ("Adam", (0.9, 0.98), 1e-9, 1.0)
    return Result(ok, tr("{got}, betas {got2}, eps {got3}, base lr {got4}").format(got=got[0], got2=got[1], got3=got[2], got4=got[3]),
                  tr("Adam, betas (0.9, 0.98), eps 1e-09, base lr 1.0 (eq. (3) sets the rate)"))


@register("training.config_defaults", "training", "5.3, 5.4",
          "training defaults: warmup_steps = 4000, eps_ls = 0.1, lr factor 1, Adam betas and eps", "EXACT",
          "transformer_min.core.config.TrainConfig")
def config_defaults(ctx: Context) -> Result:
    t = TrainConfig()
    got = dict(warmup_steps=t.warmup_steps, label_smoothing=t.label_smoothing, lr_factor=t.lr_factor,
               betas=tuple(t.betas), eps=t.eps)
    want = dict(warmup_steps=4000, label_smoothing=0.1, lr_factor=1.0, betas=(0.9, 0.98), eps=1e-9)
    return Result(got == want, ", ".join(f"{k} {v}" for k, v in got.items()),
                  ", ".join(f"{k} {v}" for k, v in want.items()))


@register("training.label_smoothing_distribution", "training", "5.4",
          "label smoothing eps_ls = 0.1: q = 1 - eps + eps/(V-1) on the true class, eps/(V-1) on every "
          "other non-pad class, 0 on pad; q sums to 1", "EXACT",
          "transformer_min.training.loss.smoothed_target")
def ls_distribution(ctx: Context) -> Result:
    from transformer_min.training.loss import smoothed_target

    V, eps, pad = 11, 0.1, 0
    target = torch.tensor([[5, 3, 10]])
    q = smoothed_target(target, V, eps, pad).double()  # (1, 3, V)
    true = q.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    other = q.clone()
    other.scatter_(-1, target.unsqueeze(-1), float("nan"))
    other[..., pad] = float("nan")
    others = other[~other.isnan()]
    ok = (bool(torch.allclose(true, torch.full_like(true, 1 - eps + eps / (V - 1)), atol=1e-7))
          and bool(torch.allclose(others, torch.full_like(others, eps / (V - 1)), atol=1e-7))
          and bool((q[..., pad] == 0).all()) and (q.sum(-1) - 1).abs().max().item() < 1e-6)
    lines = [tr("q for target 5, V = 11 (pad 0): {q}").format(q=" ".join(f"{v:.4f}" for v in q[0, 0].tolist()))]
    return Result(ok, tr("true {item:.5f}, other {item2:.5f}, pad {item3:g}, sum {item4:.6f}").format(item=true[0, 0].item(), item2=others[0].item(), item3=q[0, 0, pad].item(), item4=q[0, 0].sum().item()),
                  tr("true {value:.5f}, other {eps:.5f}, pad 0, sum 1").format(value=1 - eps + eps / (V - 1), eps=eps / (V - 1)), lines)


@register("training.label_smoothing_loss", "training", "5.4",
          "the loss is -sum_c q_c log p_c over non-pad target positions (and the NLL is -log p_y)", "EXACT",
          "transformer_min.training.loss.label_smoothed_nll")
def ls_loss(ctx: Context) -> Result:
    from transformer_min.training.loss import label_smoothed_nll, smoothed_target

    V, eps, pad = 11, 0.1, 0
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, V, generator=g, dtype=torch.float64)
    target = torch.tensor([[4, 7, 2, pad, pad], [9, 3, 5, 6, 2]])
    loss, nll, n = label_smoothed_nll(logits, target, eps, pad)
    logp = torch.log_softmax(logits, -1)
    q = smoothed_target(target, V, eps, pad).double()
    keep = target != pad
    want_loss = -(q * logp).sum(-1)[keep].sum().item()
    want_nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep].sum().item()
    err = max(abs(float(loss) - want_loss), abs(float(nll) - want_nll))
    ok = err < 1e-5 and n == int(keep.sum())
    return Result(ok, tr("loss {loss:.6f}, nll {nll:.6f}, {n} tokens (|diff| {err})").format(loss=float(loss), nll=float(nll), n=n, err=fmt(err)),
                  tr("loss {want_loss:.6f}, nll {want_nll:.6f}, {sum} tokens").format(want_loss=want_loss, want_nll=want_nll, sum=int(keep.sum())))
