"""Stage `positional`: the sinusoidal positional encoding of section 3.5."""

from __future__ import annotations

import math

import numpy as np
import torch

from transformer_min.model import embeddings, reference
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("positional", "Sinusoidal positional encoding", "3.5"),)

# PAPER.md test vectors at d_model = 512: (pos, dim, value), float64.
PE_TEST_VECTORS = [
    (0, 0, 0.0), (0, 1, 1.0),
    (1, 0, 0.8414709848078965), (1, 1, 0.5403023058681398),
    (1, 2, 0.8218561900175316), (1, 3, 0.5696950086931313),
    (1, 256, 0.009999833334166664), (2, 1, -0.4161468365471424),
    (10, 100, 0.9964723308680214), (10, 101, -0.08392195073073737),
    (100, 256, 0.8414709848078965), (100, 257, 0.5403023058681398),
    (1000, 510, 0.1034777302653366), (1000, 511, 0.9946317707268023),
]


def _table(ctx: Context, length: int, d_model: int) -> torch.Tensor:
    # Through the module attribute, so a patched (deliberately broken) PE is what gets checked.
    return ctx.memo(f"pe.{length}.{d_model}",
                    lambda: embeddings.sinusoidal_table(length, d_model, dtype=torch.float64))


@register("positional.test_vectors", "positional", "3.5",
          "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...), at the PAPER.md test points",
          "EXACT", "transformer_min.model.embeddings.sinusoidal_table")
def test_vectors(ctx: Context) -> Result:
    pe = _table(ctx, 1001, 512)
    lines, err = [], 0.0
    for pos, dim, want in PE_TEST_VECTORS:
        got = pe[pos, dim].item()
        err = max(err, abs(got - want))
        lines.append(tr("PE({pos}, {dim}) = {got}   paper: {want}").format(
            pos=f"{pos:4d}", dim=f"{dim:3d}", got=f"{got: .16f}", want=f"{want: .16f}"))
    return Result(err < 1e-12, tr("max abs error {err} (float64)").format(err=fmt(err)), "< 1e-12", lines)


@register("positional.matches_numpy_formula", "positional", "3.5",
          "the vectorised table equals the formula written element by element (NumPy)", "EXACT",
          "transformer_min.model.embeddings.sinusoidal_table")
def matches_numpy(ctx: Context) -> Result:
    d = ctx.cfg.model.d_model
    n = min(ctx.cfg.model.max_len, 64)
    err = np.abs(_table(ctx, n, d).numpy() - reference.positional_encoding(n, d)).max()
    return Result(err < 1e-12, tr("max abs diff {err} over ({n}, {d})").format(err=fmt(err), n=n, d=d), "< 1e-12")


@register("positional.range_and_distinct", "positional", "3.5",
          "values lie in [-1, 1] and every position gets a distinct vector", "EXACT",
          "transformer_min.model.embeddings.SinusoidalPositionalEncoding")
def range_distinct(ctx: Context) -> Result:
    m = ctx.cfg.model
    pe = _table(ctx, m.max_len, m.d_model)
    lo, hi = pe.min().item(), pe.max().item()
    dist = torch.cdist(pe, pe)  # (L, L)
    dist.fill_diagonal_(float("inf"))
    min_dist = dist.min().item()
    # post 002: PE added to zeros of (1, seq_len, d_model), its range and how far position 0 is from 1
    v = ctx.cfg.verify
    x = embeddings.SinusoidalPositionalEncoding(m.d_model, m.max_len, dropout=0.0).eval()(
        torch.zeros(1, v.seq_len, m.d_model))
    lines = [tr("PE table (max_len, d_model) = {shape}; range [{lo:.4f}, {hi:.4f}]; closest two positions "
                "{dist:.4f} apart").format(shape=str(tuple(pe.shape)), lo=lo, hi=hi, dist=min_dist),
             tr("zeros (1, seq_len, d_model) = {shape} + PE: range [{lo:.4f}, {hi:.4f}]; "
                "sum |PE(pos 0) - PE(pos 1)| = {diff:.4f}").format(
                 shape=str(tuple(x.shape)), lo=x.min().item(), hi=x.max().item(),
                 diff=(x[0, 0] - x[0, 1]).abs().sum().item())]
    return Result(lo >= -1 and hi <= 1 and min_dist > 1e-3, tr("range [{lo}, {hi}], min distance {min_dist}").format(lo=fmt(lo), hi=fmt(hi), min_dist=fmt(min_dist)),
                  tr("within [-1, 1], min distance > 0"), lines)


@register("positional.relative_rotation", "positional", "3.5",
          "PE(pos+k) = M_k PE(pos) with M_k block-diagonal 2x2 rotations independent of pos", "EXACT",
          "transformer_min.model.embeddings.sinusoidal_table")
def relative_rotation(ctx: Context) -> Result:
    d = 512
    pe = _table(ctx, 2048, d)  # (L, D) float64
    w = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)  # w_i = 10000^(-2i/d)
    err = 0.0
    for k in (1, 7, 50):
        c, s = torch.cos(k * w), torch.sin(k * w)
        sin_p, cos_p = pe[:-k, 0::2], pe[:-k, 1::2]
        # [[cos kw, sin kw], [-sin kw, cos kw]] applied to (sin, cos) of pos gives PE(pos + k)
        pred_sin = c * sin_p + s * cos_p
        pred_cos = -s * sin_p + c * cos_p
        err = max(err, (pred_sin - pe[k:, 0::2]).abs().max().item(), (pred_cos - pe[k:, 1::2]).abs().max().item())
    return Result(err < 1e-9, tr("max abs error {err} (float64, k in 1, 7, 50)").format(err=fmt(err)), "< 1e-9")


@register("positional.wavelengths", "positional", "3.5",
          "wavelengths form a geometric progression from 2*pi to 10000*2*pi", "EXACT",
          "transformer_min.model.embeddings.sinusoidal_table")
def wavelengths(ctx: Context) -> Result:
    d = 512
    pe = _table(ctx, 2048, d)
    # recover the frequency of dimension pair i from PE(1, 2i) = sin(w_i)  (w_i <= 1, so asin is exact)
    w = torch.asin(pe[1, 0::2])
    lam = 2 * math.pi / w
    first, last = lam[0].item(), lam[-1].item()
    want_last = 2 * math.pi * 10000 ** (510 / 512)
    ok = abs(first - 2 * math.pi) < 1e-9 and abs(last - want_last) / want_last < 1e-6
    return Result(ok, f"{first:.6f} .. {last:.3f}", f"{2 * math.pi:.6f} .. {want_last:.3f}")
