"""Stage `position_variants`: positions carried by attention instead of added to the embeddings
(model.positional = "rope" or "relative"; deviations from section 3.5), and the variant of the configured
model checked end to end with the key/value cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.decoding.stepper import TransformerStepper
from transformer_min.model import reference, relative, rotary, variants
from transformer_min.model.transformer import build_model
from transformer_min.verify.base import Context, Result, Stage, fmt, register
from transformer_min.core.i18n import tr

STAGES = (Stage("position_variants", "Positions in attention: rotary and relative", "3.5"),)

ROPE_D = 16  # head size of the RoPE examples
SHAW = dict(L=9, D=12, H=3, d_k=4, d_v=5, clip=2)  # small enough for the loops of eq. (3)-(4)


def _rope_score(q: torch.Tensor, k: torch.Tensor, m: int, n: int) -> float:
    """q at position m, k at position n, both rotated (RoFormer eq. (34)), then q . k."""
    qm = rotary.rotate_pairs(q, rotary.rotary_angles(m, 1, q.size(-1)))
    kn = rotary.rotate_pairs(k, rotary.rotary_angles(n, 1, k.size(-1)))
    return float((qm * kn).sum())


@register("position_variants.rope_relative_offset", "position_variants", "3.5; Su et al. (2021) eq. (16)",
          "RoPE: the score of q at position m and k at n depends on m - n only (shifting both by s changes "
          "nothing), and the rotations keep vector norms", "EXACT",
          "transformer_min.model.rotary.RotaryAttention.encode_positions")
def rope_relative_offset(ctx: Context) -> Result:
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed)
    q, k = torch.randn(2, 1, ROPE_D, generator=g, dtype=torch.float64).unbind(0)  # (1, d) each
    shift_err = max(abs(_rope_score(q, k, m + s, n + s) - _rope_score(q, k, m, n))
                    for m, n in ((3, 1), (0, 7), (5, 5), (12, 2)) for s in (1, 17, 200))
    x = torch.randn(30, ROPE_D, generator=g, dtype=torch.float64)
    rotated = rotary.rotate_pairs(x, rotary.rotary_angles(0, 30, ROPE_D))
    norm_err = float((rotated.norm(dim=-1) - x.norm(dim=-1)).abs().max())
    elem_err = float(np.abs(rotated.numpy() - reference.rotary(x.numpy(), np.arange(30))).max())
    ok = shift_err < 1e-5 and norm_err < 1e-9 and elem_err < 1e-9
    return Result(ok, tr("score change under a shift {shift_err}, norm change {norm_err}, vs eq. (34) element by element {elem_err} (d = {ROPE_D}, s in 1, 17, 200)").format(shift_err=fmt(shift_err), norm_err=fmt(norm_err), elem_err=fmt(elem_err), ROPE_D=ROPE_D),
                  "< 1e-5, < 1e-9, < 1e-9")


def _shaw_module(ctx: Context) -> relative.RelativeAttention:
    torch.manual_seed(ctx.cfg.verify.seed)
    s = SHAW
    return relative.RelativeAttention(s["D"], s["H"], d_k=s["d_k"], d_v=s["d_v"], bias=False,
                                      relative_clip=s["clip"]).double().eval()


@register("position_variants.shaw_equals_eq_3_4", "position_variants", "3.5; Shaw et al. (2018) eq. (3)-(4)",
          "relative attention equals eq. (3)-(4) written with loops (NumPy), a_ij = w_clip(j-i, k), with and "
          "without the causal mask", "EXACT", "transformer_min.model.relative.RelativeAttention.attend")
def shaw_equals_eq_3_4(ctx: Context) -> Result:
    s, mha = SHAW, _shaw_module(ctx)
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed + 1)
    x = torch.randn(1, s["L"], s["D"], generator=g, dtype=torch.float64)
    p = {name: t.detach().numpy() for name, t in mha.state_dict().items()}
    err = 0.0
    for mask in (None, torch.ones(s["L"], s["L"], dtype=torch.bool).tril()):
        with torch.no_grad():
            got, _ = mha(query=x, key=x, value=x, mask=mask)
        want = reference.relative_attention(x[0].numpy(), p["w_q.weight"].T, p["w_k.weight"].T, p["w_v.weight"].T,
                                            p["w_o.weight"].T, p["rel_k"], p["rel_v"], s["H"], s["clip"],
                                            None if mask is None else mask.numpy())
        err = max(err, float(np.abs(got[0].numpy() - want).max()))
    return Result(err < 1e-10, tr("max abs diff {err} (float64, L {L}, h {H}, k {clip})").format(err=fmt(err), L=s['L'], H=s['H'], clip=s['clip']),
                  "< 1e-10")


@register("position_variants.shaw_clipping", "position_variants", "3.5; Shaw et al. (2018) eq. (5)",
          "relative attention: with equal keys, the logits at offsets beyond +-k equal those at +-k (and differ "
          "inside)", "EXACT", "transformer_min.model.relative.relative_buckets")
def shaw_clipping(ctx: Context) -> Result:
    s, mha = SHAW, _shaw_module(ctx)
    k, L = s["clip"], s["L"]
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed + 2)
    q = torch.randn(1, s["H"], L, s["d_k"], generator=g, dtype=torch.float64)
    keys = torch.randn(1, s["H"], 1, s["d_k"], generator=g, dtype=torch.float64).expand(1, s["H"], L, s["d_k"])
    with torch.no_grad():
        e = mha.scores(q, keys)[0]  # (H, L, L): only a^K_ij differs along a row
    beyond = inside = 0.0
    for i in range(L):
        for j in range(L):
            edge = i + (k if j > i else -k)
            if abs(j - i) > k:
                beyond = max(beyond, float((e[:, i, j] - e[:, i, edge]).abs().max()))
            elif j != i:
                inside = max(inside, float((e[:, i, j] - e[:, i, i]).abs().max()))
    return Result(beyond < 1e-12 and inside > 1e-6,
                  tr("beyond +-{k}: max diff to the +-{k} logit {beyond}; inside: differs by up to {inside}").format(k=k, beyond=fmt(beyond), inside=fmt(inside)),
                  tr("0 beyond, > 0 inside"))


def _tiny(m: ModelConfig) -> Config:
    """The configured model's positional variant at a size the check runs in a moment."""
    small = dataclasses.replace(m, d_model=32, num_heads=4, d_k=None, d_v=None, free_head_dims=False, d_ff=48,
                                num_layers=2, dropout=0.0, max_len=64)
    return Config(model=small, vocab=VocabConfig(src_size=20, tgt_size=20))


@register("position_variants.configured_cached_decoding", "position_variants", "3.5, 6.1",
          "the configured model.positional variant decodes the same with the key/value cache as by re-running "
          "the whole prefix (positions offset by the cache length)", "ARCH",
          "transformer_min.model.attention.MultiHeadAttention.forward")
def configured_cached_decoding(ctx: Context) -> Result:
    torch.manual_seed(ctx.cfg.verify.seed)
    model = build_model(_tiny(ctx.cfg.model)).eval()
    g = torch.Generator().manual_seed(ctx.cfg.verify.seed)
    src = torch.randint(3, 20, (3, 9), generator=g)
    prefix = torch.cat([torch.ones(3, 1, dtype=torch.long), torch.randint(3, 20, (3, 11), generator=g)], 1)
    cached, full = (TransformerStepper(model, src, 0, use_cache=c) for c in (True, False))
    err = 0.0
    with torch.no_grad():
        for t in range(1, prefix.size(1) + 1):
            err = max(err, float((cached.step(prefix[:, :t]) - full.step(prefix[:, :t])).abs().max()))
    lines = [variants.describe(ctx.cfg.model)]
    return Result(err < 1e-4, tr("max log-prob diff {err} over {size} steps").format(err=fmt(err), size=prefix.size(1)), "< 1e-4", lines)
