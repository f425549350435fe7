"""Stage `multihead`: section 3.2.2 on the [model] sizes, against torch.nn.MultiheadAttention."""

from __future__ import annotations

import torch
from torch import nn

from transformer_min.model import attention, masks
from transformer_min.core.i18n import tr
from transformer_min.verify.printing import matrix_lines, shape, weight_matrix
from transformer_min.verify.base import Context, Result, Stage, fmt, register
from transformer_min.verify.fixtures import copy_attention_weights

STAGES = (Stage("multihead", "Multi-head attention", "3.2.2"),)


def setup(ctx: Context) -> dict:
    def run():
        m, v = ctx.cfg.model, ctx.cfg.verify
        torch.manual_seed(v.seed)
        mha = attention.MultiHeadAttention(m.d_model, m.num_heads, m.d_k, m.d_v).eval()
        x = torch.randn(v.batch_size, v.seq_len, m.d_model)
        with torch.no_grad():
            out, w = mha(query=x, key=x, value=x, need_weights=True)
        return {"mha": mha, "x": x, "out": out, "weights": w}

    return ctx.memo("multihead.setup", run)


@register("multihead.shapes", "multihead", "3.2.2",
          "h heads give per-head weights (B, H, L, L); Concat(heads) W^O returns to (B, L, d_model)", "EXACT",
          "transformer_min.model.attention.MultiHeadAttention")
def shapes(ctx: Context) -> Result:
    s, m, v = setup(ctx), ctx.cfg.model, ctx.cfg.verify
    want_w = (v.batch_size, m.num_heads, v.seq_len, v.seq_len)
    want_o = (v.batch_size, v.seq_len, m.d_model)
    got_w, got_o = tuple(s["weights"].shape), tuple(s["out"].shape)
    mha = s["mha"]
    w = s["weights"]
    lines = [
        f"d_model {m.d_model}, h {m.num_heads}, d_k {mha.d_k}, d_v {mha.d_v}",
        f"W^Q {tuple(mha.w_q.weight.T.shape)}  W^K {tuple(mha.w_k.weight.T.shape)}  "
        f"W^V {tuple(mha.w_v.weight.T.shape)}  W^O {tuple(mha.w_o.weight.T.shape)}",
        tr("input   (batch, seq_len, d_model)    = {shape}").format(shape=shape(s["x"])),
        tr("weights (batch, h, seq_len, seq_len) = {shape}").format(shape=str(got_w)),
        tr("output  (batch, seq_len, d_model)    = {shape}").format(shape=str(got_o)),
        *matrix_lines(tr("head 0 weights, sentence 0"), w[0, 0]),
    ]
    matrices = {f"head{h}": weight_matrix(w[0, h]) for h in range(w.shape[1])}
    return Result(got_w == want_w and got_o == want_o, tr("weights {got_w}, output {got_o}").format(got_w=got_w, got_o=got_o),
                  tr("weights {want_w}, output {want_o}").format(want_w=want_w, want_o=want_o), lines, matrices)


def _torch_mha(mha: attention.MultiHeadAttention, d_model: int) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention holding our weights."""
    ref = nn.MultiheadAttention(d_model, mha.num_heads, batch_first=True).eval()
    copy_attention_weights(mha, ref)
    return ref


@register("multihead.matches_torch", "multihead", "3.2.2",
          "equals torch.nn.MultiheadAttention with copied weights (outputs and head-averaged weights)",
          "EXACT", "transformer_min.model.attention.MultiHeadAttention")
def matches_torch(ctx: Context) -> Result:
    s = setup(ctx)
    mha, x = s["mha"], s["x"]
    if mha.d_k * mha.num_heads != x.shape[-1]:
        return Result.skip(tr("d_k * h != d_model (torch.nn.MultiheadAttention needs d_k = d_model / h)"))
    ref = _torch_mha(mha, x.shape[-1])
    pad = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool)
    pad[0, -2:] = False  # mask the last two keys of sentence 0
    with torch.no_grad():
        ours, w = mha(query=x, key=x, value=x, mask=pad[:, None, None, :], need_weights=True)
        # nn.MultiheadAttention's boolean key_padding_mask means True = ignore: the opposite convention.
        theirs, tw = ref(x, x, x, key_padding_mask=~pad, need_weights=True, average_attn_weights=True)
    err = max((ours - theirs).abs().max().item(), (w.mean(1) - tw).abs().max().item())
    return Result(err < 1e-5, tr("max abs diff {err}").format(err=fmt(err)), "< 1e-5")


@register("multihead.fast_equals_paper_path", "multihead", "3.2.2",
          "the fused fast path equals the explicit eq. (1) path (self and cross attention, masked)",
          "EXACT", "transformer_min.model.attention.MultiHeadAttention.forward")
def fast_equals_paper(ctx: Context) -> Result:
    s = setup(ctx)
    mha, x = s["mha"], s["x"]
    mem = torch.randn(x.shape[0], x.shape[1] + 3, x.shape[-1])  # cross-attention: Lk != Lq
    key_pad = torch.ones(x.shape[0], 1, 1, mem.shape[1], dtype=torch.bool)
    key_pad[-1, ..., -4:] = False
    err = 0.0
    with torch.no_grad():
        for q, kv, mask in ((x, x, masks.causal_mask(x.shape[1])), (x, mem, key_pad)):
            slow, _ = mha(query=q, key=kv, value=kv, mask=mask, need_weights=True)
            fast, _ = mha(query=q, key=kv, value=kv, mask=mask, need_weights=False)
            err = max(err, (slow - fast).abs().max().item())
    return Result(err < 1e-5, tr("max abs diff {err}").format(err=fmt(err)), tr("< 1e-5 (float32)"))
