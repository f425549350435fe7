"""Stage `scaling`: why eq. (1) divides by sqrt(d_k) (section 3.2.1, footnote 4)."""

from __future__ import annotations

import math

import torch

from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, register

STAGES = (Stage("scaling", "Why 1/sqrt(d_k)", "3.2.1, footnote 4"),)


@register("scaling.dot_product_variance", "scaling", "3.2.1, footnote 4",
          "for unit-variance independent q, k: q.k has mean 0 and variance d_k (64 at d_k = 64)", "STAT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def variance(ctx: Context) -> Result:
    d_k, n = 64, 1_000_000
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed)
    dots = torch.cat([(torch.randn(n // 4, d_k, generator=g, dtype=torch.float64)
                       * torch.randn(n // 4, d_k, generator=g, dtype=torch.float64)).sum(-1) for _ in range(4)])
    var, mean = dots.var().item(), dots.mean().item()
    scaled_var = (dots / math.sqrt(d_k)).var().item()
    lines = [tr("{n} samples at d_k = {d_k}: mean {mean}, variance {var} (std {std}); after / sqrt(d_k): variance "
                "{scaled}").format(n=f"{n:,}", d_k=d_k, mean=f"{mean:.4f}", var=f"{var:.3f}",
                                   std=f"{math.sqrt(var):.3f}", scaled=f"{scaled_var:.4f}")]
    return Result(abs(var - d_k) < 0.5 and abs(mean) < 0.05, tr("var {var:.3f}, mean {mean:.4f}").format(var=var, mean=mean),
                  tr("|var - 64| < 0.5 (SE ~0.093), |mean| < 0.05"), lines)


@register("scaling.softmax_saturation", "scaling", "3.2.1",
          "unscaled at d_k = 512 the logits have std ~22.6 and the softmax is nearly one-hot with "
          "vanishing gradients; dividing by sqrt(d_k) avoids it", "STAT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def saturation(ctx: Context) -> Result:
    d_k, rows, keys = 512, 2000, 16
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed)
    q = torch.randn(rows, 1, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(rows, keys, d_k, generator=g, dtype=torch.float64)
    stats = {}
    for name, scale in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d_k))):
        logits = ((q @ k.transpose(1, 2)) * scale).squeeze(1).requires_grad_(True)  # (rows, keys)
        p = torch.softmax(logits, -1)
        # gradient of the top probability with respect to the logits: small when saturated
        p.max(-1).values.sum().backward()
        stats[name] = (logits.std().item(), p.max(-1).values.mean().item(),
                       logits.grad.norm(dim=-1).mean().item())
    (su, mu, gu), (ss, ms, gs) = stats["unscaled"], stats["scaled"]
    # one line per case (a table's columns would not line up once the labels are Chinese); post 003's
    # "max softmax probability, unscaled / scaled" experiment is the middle number
    lines = [tr("unscaled q.k (d_k = {d_k}): logit std {std}, mean max softmax p {p}, grad norm {grad}").format(
                 d_k=d_k, std=f"{su:.2f}", p=f"{mu:.4f}", grad=f"{gu:.4f}"),
             tr("scaled q.k / sqrt(d_k): logit std {std}, mean max softmax p {p}, grad norm {grad}").format(
                 std=f"{ss:.2f}", p=f"{ms:.4f}", grad=f"{gs:.4f}")]
    ok = abs(su - math.sqrt(d_k)) / math.sqrt(d_k) < 0.03 and mu > 0.85 and ms < 0.6 and gu < gs / 3
    return Result(ok, tr("std {su:.1f}, max p {mu:.3f} vs {ms:.3f}, grad {gu:.3f} vs {gs:.3f}").format(su=su, mu=mu, ms=ms, gu=gu, gs=gs),
                  tr("std ~22.6; max p > 0.85 unscaled, < 0.6 scaled; grad 3x smaller unscaled"), lines)
