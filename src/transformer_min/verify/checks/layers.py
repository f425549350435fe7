"""Stages `encoder` and `decoder`: section 3.1 layers against PyTorch's own layers, copied weights."""

from __future__ import annotations

import torch
from torch import nn

from transformer_min.model import masks
from transformer_min.core.i18n import tr
from transformer_min.model.build import decoder_layer, encoder_layer
from transformer_min.verify.fixtures import copy_attention_weights
from transformer_min.verify.printing import matrix_lines, shape, weight_matrix
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (
    Stage("encoder", "Encoder layer", "3.1, 3.2.3, 3.3"),
    Stage("decoder", "Decoder layer", "3.1, 3.2.3"),
)


def _torch_twin(cls, ours, m):
    """torch.nn.TransformerEncoderLayer / DecoderLayer (post-norm, eval) holding `ours`'s weights."""
    theirs = cls(m.d_model, m.num_heads, m.d_ff, dropout=0.0, batch_first=True, norm_first=False,
                 layer_norm_eps=m.layer_norm_eps).eval()
    with torch.no_grad():
        copy_attention_weights(ours.self_attn, theirs.self_attn)
        if hasattr(ours, "cross_attn"):
            copy_attention_weights(ours.cross_attn, theirs.multihead_attn)
        theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
        theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(ours, name):
                getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())
    return theirs


MEMORY_EXTRA = 3  # the decoder's memory is seq_len + 3 long, so that S != T tests the cross-attention shapes


def _inputs(ctx: Context):
    """x (B, seq_len, D); memory (B, seq_len + 3, D); keep masks for both (True = real token), with the last
    positions of sentence 0 as padding (3 of them, fewer when seq_len is under 4: one token always stays)."""
    m, v = ctx.cfg.model, ctx.cfg.verify
    g = torch.Generator().manual_seed(v.seed)
    x = torch.randn(v.batch_size, v.seq_len, m.d_model, generator=g)
    memory = torch.randn(v.batch_size, v.seq_len + MEMORY_EXTRA, m.d_model, generator=g)  # S != T
    x_keep = torch.ones(v.batch_size, v.seq_len, dtype=torch.bool)
    x_keep[0, v.seq_len - min(3, v.seq_len - 1):] = False  # padding in sentence 0
    memory_keep = torch.ones(v.batch_size, memory.shape[1], dtype=torch.bool)
    memory_keep[0, -3:] = False
    return x, memory, x_keep, memory_keep


def _layer_args(ctx: Context) -> dict:
    m = ctx.cfg.model
    return dict(d_model=m.d_model, num_heads=m.num_heads, d_ff=m.d_ff, dropout=0.0,
                layer_norm_eps=m.layer_norm_eps, d_k=m.d_k, d_v=m.d_v)


def _torch_has_our_heads(ctx: Context) -> bool:
    """torch's layers know only d_k = d_v = d_model / h; with other head sizes (Table 3 rows A/B, a flat
    file's d_k left behind by a new num_heads) the comparison is skipped and the shapes are still printed."""
    m = ctx.cfg.model
    return m.head_dim_k * m.num_heads == m.d_model and m.head_dim_v * m.num_heads == m.d_model


SKIPPED = "d_k * h or d_v * h != d_model (torch's layer needs d_model / h)"


@register("encoder.matches_torch_layer", "encoder", "3.1",
          "encoder layer = LayerNorm(x + SelfAttn(x)), LayerNorm(x + FFN(x)); equals "
          "torch.nn.TransformerEncoderLayer (post-norm, ReLU, eval) with copied weights", "ARCH",
          "transformer_min.model.layers.EncoderLayer")
def encoder_matches(ctx: Context) -> Result:
    m = ctx.cfg.model
    torch.manual_seed(ctx.cfg.verify.seed)
    ours = encoder_layer(**_layer_args(ctx)).eval()
    x, _, keep, _ = _inputs(ctx)
    with torch.no_grad():
        a, w = ours(x, keep[:, None, None, :], need_weights=True)
    n_pad = int((~keep[0]).sum())
    lines = [tr("input (batch, seq_len, d_model) = {shape}; sentence 0 ends in {pad} padding positions").format(
                 shape=shape(x), pad=n_pad),
             tr("self-attention weights (batch, h, seq_len, seq_len) = {shape}").format(shape=shape(w)),
             tr("sub-layer 1: LayerNorm(x + SelfAttn(x)) {shape}").format(shape=shape(x)),
             tr("sub-layer 2: FFN inner layer {inner}, LayerNorm(x + FFN(x)) {shape}").format(
                 inner=str((x.shape[0], x.shape[1], m.d_ff)), shape=shape(a)),
             tr("output (batch, seq_len, d_model) = {shape}").format(shape=shape(a))]
    if not _torch_has_our_heads(ctx):
        return Result.skip(tr(SKIPPED), lines)
    theirs = _torch_twin(nn.TransformerEncoderLayer, ours, m)
    with torch.no_grad():
        b = theirs(x, src_key_padding_mask=~keep)  # torch: True = ignore
    a, b = a[keep], b[keep]  # compare real positions
    err = (a - b).abs().max().item()
    return Result(err < 1e-5, tr("max abs diff {err}").format(err=fmt(err)), "< 1e-5", lines)


@register("encoder.padding_keys_ignored", "encoder", "3.2.3",
          "padded source positions receive weight 0 and do not change the real positions' outputs", "ARCH",
          "transformer_min.model.masks.padding_mask")
def padding_ignored(ctx: Context) -> Result:
    torch.manual_seed(ctx.cfg.verify.seed)
    layer = encoder_layer(**_layer_args(ctx)).eval()
    x, _, keep, _ = _inputs(ctx)
    n = int(keep[0].sum())
    with torch.no_grad():
        full, w = layer(x[:1], keep[:1, None, None, :], need_weights=True)
        short, _ = layer(x[:1, :n], None)
    err = (full[0, :n] - short[0]).abs().max().item()
    leaked = w[0, :, :, n:].abs().max().item()
    return Result(err < 1e-5 and leaked == 0.0, tr("diff vs unpadded {err}, weight on pads {leaked}").format(err=fmt(err), leaked=fmt(leaked)),
                  tr("< 1e-5, exactly 0"))


@register("decoder.matches_torch_layer", "decoder", "3.1",
          "decoder layer = masked self-attn, encoder-decoder attn, FFN, each Add & Norm; equals "
          "torch.nn.TransformerDecoderLayer (post-norm, ReLU, eval) with copied weights", "ARCH",
          "transformer_min.model.layers.DecoderLayer")
def decoder_matches(ctx: Context) -> Result:
    m = ctx.cfg.model
    torch.manual_seed(ctx.cfg.verify.seed)
    ours = decoder_layer(**_layer_args(ctx)).eval()
    x, memory, _, keep = _inputs(ctx)
    causal = masks.causal_mask(x.shape[1])
    with torch.no_grad():
        a, sw, cw = ours(x, memory, keep[:, None, None, :], causal, need_weights=True)
    lines = [tr("target (batch, T, d_model) = {shape}").format(shape=shape(x)),
             tr("memory (batch, S, d_model) = {shape}: S = seq_len + {extra}, so that S != T tests the "
                "cross-attention shapes").format(shape=shape(memory), extra=MEMORY_EXTRA),
             tr("masked self-attention weights (batch, h, T, T) = {shape}").format(shape=shape(sw)),
             tr("cross-attention weights (batch, h, T, S) = {shape}").format(shape=shape(cw)),
             tr("output (batch, T, d_model) = {shape}").format(shape=shape(a))]
    if not _torch_has_our_heads(ctx):
        return Result.skip(tr(SKIPPED), lines)
    theirs = _torch_twin(nn.TransformerDecoderLayer, ours, m)
    with torch.no_grad():
        b = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~keep)
    err = (a - b).abs().max().item()
    return Result(err < 1e-5, tr("max abs diff {err}").format(err=fmt(err)), "< 1e-5", lines)


@register("decoder.causal_weights_zero_above_diagonal", "decoder", "3.1, 3.2.3",
          "decoder position i attends only to positions <= i: weights above the diagonal are exactly 0",
          "EXACT", "transformer_min.model.masks.causal_mask")
def causal_zero(ctx: Context) -> Result:
    torch.manual_seed(ctx.cfg.verify.seed)
    layer = decoder_layer(**_layer_args(ctx)).eval()
    x, memory, _, keep = _inputs(ctx)
    T = x.shape[1]
    with torch.no_grad():
        _, sw, _ = layer(x, memory, keep[:, None, None, :], masks.causal_mask(T), need_weights=True)
    upper = torch.ones(T, T, dtype=torch.bool).triu(1)
    above = sw[..., upper]
    diag = torch.diagonal(sw, dim1=-2, dim2=-1)
    nonzero = int((above != 0).sum())
    lines = matrix_lines(tr("head 0 masked self-attention weights, sentence 0"), sw[0, 0])
    matrices = {f"self_attn_head{h}": weight_matrix(sw[0, h]) for h in range(sw.shape[1])}
    ok = nonzero == 0 and bool((diag > 0).all())
    return Result(ok, tr("{nonzero} non-zero above the diagonal; diagonal min {item}").format(nonzero=nonzero, item=fmt(diag.min().item())),
                  tr("0 above; diagonal > 0 (lower-triangular incl. diagonal)"), lines, matrices)
