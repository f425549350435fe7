"""Stage `embeddings`: embedding scale and three-way weight tying (section 3.4), PE precision (3.5)."""

from __future__ import annotations

import math

import torch

from transformer_min.model import embeddings
from transformer_min.model.transformer import count_parameters
from transformer_min.verify.fixtures import tiny_batch, tiny_model
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("embeddings", "Embeddings and weight tying", "3.4, 3.5"),)

SQRT_512 = 22.62741699796952  # PAPER.md, section 3.4


@register("embeddings.scaled_by_sqrt_d_model", "embeddings", "3.4",
          "embedding weights are multiplied by sqrt(d_model) = 22.62741699796952 at 512", "EXACT",
          "transformer_min.model.embeddings.TokenEmbedding.forward")
def scaled(ctx: Context) -> Result:
    torch.manual_seed(0)
    emb = embeddings.TokenEmbedding(100, 512).double()
    tokens = torch.tensor([[3, 17, 99, 0]])
    with torch.no_grad():
        out = emb(tokens)  # (1, 4, 512)
        ratio = out / emb.weight[tokens]
    lo, hi = ratio.min().item(), ratio.max().item()
    ok = abs(lo - SQRT_512) < 1e-12 and abs(hi - SQRT_512) < 1e-12 and abs(math.sqrt(512) - SQRT_512) < 1e-13
    return Result(ok, tr("output / weight in [{lo:.14f}, {hi:.14f}]").format(lo=lo, hi=hi), f"{SQRT_512}")


@register("embeddings.pre_softmax_not_scaled", "embeddings", "3.4",
          "the pre-softmax linear layer is not scaled and has no bias: logits = h W_emb^T", "EXACT",
          "transformer_min.model.transformer.Transformer.forward")
def pre_softmax(ctx: Context) -> Result:
    model = tiny_model()
    src, tgt = tiny_batch()
    caught = {}
    hook = model.generator.register_forward_pre_hook(lambda m, args: caught.__setitem__("h", args[0]))
    try:
        with torch.no_grad():
            logits = model(src, tgt)
    finally:
        hook.remove()
    by_hand = caught["h"] @ model.src_embed.weight.T  # (B, T, D) @ (D, V)
    err = (logits - by_hand).abs().max().item()
    no_bias = model.generator.bias is None
    return Result(err < 1e-5 and no_bias, tr("max |logits - h W^T| {err}; output bias: {value}").format(err=fmt(err), value=not no_bias),
                  tr("< 1e-5 (no sqrt(d_model) factor); output bias: False"))


@register("embeddings.three_way_tying", "embeddings", "3.4",
          "one weight matrix (the same Parameter) for the source embedding, the target embedding and "
          "the pre-softmax linear layer; counted once", "ARCH",
          "transformer_min.model.transformer.Transformer.__init__")
def three_way_tying(ctx: Context) -> Result:
    model = tiny_model()
    a, b, c = model.src_embed.weight, model.tgt_embed.weight, model.generator.weight
    same = a is b and b is c
    n_shared = sum(1 for p in model.parameters() if p is a)  # parameters() de-duplicates
    untied = tiny_model(weight_tying="none")
    extra = count_parameters(untied) - count_parameters(model)
    V, d = a.shape
    return Result(same and n_shared == 1 and extra == 2 * V * d,
                  tr("same object: {same}; listed {n_shared}x; untied model has {extra:,} more").format(same=same, n_shared=n_shared, extra=extra),
                  tr("True; 1x; 2 V d = {value:,} more").format(value=2 * V * d))


@register("embeddings.pe_float32_precision", "embeddings", "3.5",
          "in float32 the PE is within 7e-6 of float64 for pos <= 100 and 1.2e-4 for pos <= 2047", "EXACT",
          "transformer_min.model.embeddings.sinusoidal_table")
def pe_float32(ctx: Context) -> Result:
    pe64 = embeddings.sinusoidal_table(2048, 512, dtype=torch.float64)
    pe32 = embeddings.sinusoidal_table(2048, 512, dtype=torch.float32).double()
    err_100 = (pe32[:101] - pe64[:101]).abs().max().item()
    err_all = (pe32 - pe64).abs().max().item()
    lines = [tr("our table is computed in float64 and cast, so the float32 error is rounding only "
                "(the PAPER.md bounds are for exp(-ln(10000) 2i/d) computed in float32)")]
    return Result(err_100 <= 7e-6 and err_all <= 1.2e-4, tr("{err_100} (pos <= 100), {err_all} (pos <= 2047)").format(err_100=fmt(err_100), err_all=fmt(err_all)),
                  "<= 7e-6, <= 1.2e-4", lines)
