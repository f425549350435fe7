"""Stage `full`: the whole model of section 3 at the [model] and [vocab] sizes."""

from __future__ import annotations

import torch

from transformer_min.core.i18n import tr
from transformer_min.model.transformer import count_parameters
from transformer_min.verify.base import Context, Result, Stage, register
from transformer_min.verify.fixtures import full_batch, full_model

STAGES = (Stage("full", "Full encoder-decoder model", "3, 3.4"),)


def paper_parameter_count(N: int, d: int, d_ff: int, h: int, d_k: int, d_v: int, V: int) -> int:
    """PAPER.md's closed form for the faithful model (shared V x d embedding, biases, no final norm)."""
    p_att = 2 * d * h * d_k + d * h * d_v + h * d_v * d + (2 * h * d_k + h * d_v + d)
    p_ffn = 2 * d * d_ff + d_ff + d
    return N * (3 * p_att + 2 * p_ffn + 10 * d) + V * d


@register("full.logits_shape_finite", "full", "3, Figure 1",
          "src (B, S), shifted tgt (B, T) -> logits (B, T, tgt_vocab), all finite", "ARCH",
          "transformer_min.model.transformer.Transformer.forward")
def logits_shape(ctx: Context) -> Result:
    model = full_model(ctx)
    src, tgt = full_batch(ctx)
    with torch.no_grad():
        logits = model(src, tgt)
    want = (src.shape[0], tgt.shape[1], ctx.cfg.vocab.tgt_size)
    finite = bool(torch.isfinite(logits).all())
    n = count_parameters(model)
    lines = [tr("src (batch, S) = {src}, tgt (batch, T) = {tgt}").format(src=str(tuple(src.shape)),
                                                                         tgt=str(tuple(tgt.shape))),
             tr("output logits (batch, T, tgt_vocab) = {shape}; sum {total:.4f}").format(
                 shape=str(tuple(logits.shape)), total=logits.sum().item()),
             tr("parameters: {n} (d_model {d}, N {layers}, vocab {src}/{tgt}, tying {tying})").format(
                 n=f"{n:,}", d=ctx.cfg.model.d_model, layers=ctx.cfg.model.num_layers, src=ctx.cfg.vocab.src_size,
                 tgt=ctx.cfg.vocab.tgt_size, tying=ctx.cfg.model.weight_tying),
             tr("positions: model.positional = {value}").format(value=ctx.cfg.model.positional)]
    return Result(tuple(logits.shape) == want and finite, tr("{tuple}, finite={finite}").format(tuple=tuple(logits.shape), finite=finite),
                  tr("{want}, finite=True").format(want=want), lines)


@register("full.parameter_count_formula", "full", "3, Table 3",
          "parameter count equals the closed form N(3 P_att + 2 P_ffn + 10 d) + V d (faithful model)", "ARITH",
          "transformer_min.model.transformer.build_model")
def parameter_count(ctx: Context) -> Result:
    m, voc = ctx.cfg.model, ctx.cfg.vocab
    faithful = (m.weight_tying == "three_way" and m.positional == "sinusoidal" and m.bias
                and not m.use_final_norm)
    if not faithful:
        return Result.skip(tr("the config departs from the faithful model (the paper's stacks)"))
    want = paper_parameter_count(m.num_layers, m.d_model, m.d_ff, m.num_heads, m.head_dim_k,
                                 m.head_dim_v, voc.src_size)
    got = count_parameters(full_model(ctx))
    return Result(got == want, f"{got:,}", f"{want:,}")


@register("full.causality", "full", "3.1, 3.2.3",
          "changing target token j leaves the logits at positions < j unchanged (and changes position j)",
          "ARCH", "transformer_min.model.masks.causal_mask")
def causality(ctx: Context) -> Result:
    model = full_model(ctx)
    src, tgt = full_batch(ctx)
    T = tgt.shape[1]
    j = T // 2
    changed = tgt.clone()
    changed[:, j] = (tgt[:, j] + 1 - 3) % (ctx.cfg.vocab.tgt_size - 3) + 3
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    before = (a[:, :j] - b[:, :j]).abs().max().item()
    at = (a[:, j] - b[:, j]).abs().max().item()
    return Result(before == 0.0 and at > 0, tr("max change before j: {before:.3g}; at j: {at:.3g}").format(before=before, at=at),
                  tr("0 before j; > 0 at j"))
