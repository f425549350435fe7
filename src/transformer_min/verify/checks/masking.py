"""Stage `masking`: the decoder's causal mask and padding masks, section 3.2.3.

Masks are called through the module (`masks.causal_mask`), so a patched, deliberately broken mask
is what these checks see.
"""

from __future__ import annotations

import torch

from transformer_min.model import masks
from transformer_min.verify.fixtures import tiny_batch, tiny_model
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("masking", "Masks", "3.2.3"),)


@register("masking.causal_mask_lower_triangular", "masking", "3.2.3",
          "decoder mask: position i may attend to positions j <= i (lower-triangular, diagonal included)",
          "EXACT", "transformer_min.model.masks.causal_mask")
def causal_lower_triangular(ctx: Context) -> Result:
    bad = []
    for T in range(1, 13):
        m = masks.causal_mask(T)
        i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
        if m.dtype != torch.bool or m.shape != (T, T) or not torch.equal(m, j <= i):
            bad.append(T)
    m5 = masks.causal_mask(5)
    lines = [tr("causal_mask(5) (1 = may attend):"), *["  " + " ".join(str(int(b)) for b in r) for r in m5.tolist()]]
    return Result(not bad, tr("equal to j <= i for T = 1..12") if not bad else tr("differs at T = {bad}").format(bad=bad),
                  tr("boolean (T, T), True iff j <= i"), lines)


@register("masking.target_mask_padding_and_causal", "masking", "3.2.3",
          "decoder self-attention mask = key padding mask AND causal mask, (B, 1, T, T)", "ARCH",
          "transformer_min.model.masks.target_mask")
def target_mask(ctx: Context) -> Result:
    pad = 0
    tokens = torch.tensor([[5, 6, 7, 8], [5, 6, pad, pad]])
    got = masks.target_mask(tokens, pad)
    T = tokens.shape[1]
    want = (tokens != pad)[:, None, None, :] & torch.ones(T, T, dtype=torch.bool).tril()
    equal = got.shape == want.shape and torch.equal(got, want)
    ok = got.shape == (2, 1, T, T) and equal
    return Result(ok, tr("shape {tuple}, equal: {equal}").format(tuple=tuple(got.shape), equal=equal), tr("shape (2, 1, {T}, {T}), equal: True").format(T=T))


@register("masking.model_decoder_weights_causal", "masking", "3.2.3, eq. (1)",
          "in the whole model every decoder self-attention weight above the diagonal is exactly 0, the "
          "diagonal is > 0 and every row sums to 1", "EXACT",
          "transformer_min.model.transformer.Transformer.forward")
def model_causal(ctx: Context) -> Result:
    model = tiny_model()
    src, tgt = tiny_batch()
    with torch.no_grad():
        _, att = model(src, tgt, return_attention=True)
    w = torch.stack(att.decoder_self)  # (N, B, H, T, T)
    T = w.shape[-1]
    above = w[..., torch.ones(T, T, dtype=torch.bool).triu(1)]
    nonzero = int((above != 0).sum())
    diag_min = torch.diagonal(w, dim1=-2, dim2=-1).min().item()
    row_dev = (w.sum(-1) - 1).abs().max().item()
    ok = nonzero == 0 and diag_min > 0 and row_dev < 1e-5
    return Result(ok, tr("{nonzero} non-zero above the diagonal; diagonal min {diag_min}; max |row sum - 1| {row_dev}").format(nonzero=nonzero, diag_min=fmt(diag_min), row_dev=fmt(row_dev)), "0; > 0; < 1e-5")
