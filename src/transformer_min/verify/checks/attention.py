"""Stage `attention`: eq. (1) on the posts' demo input, section 3.2.1 and 3.2.3."""

from __future__ import annotations

import numpy as np
import torch

from transformer_min.model import attention, masks, reference
from transformer_min.model.embeddings import sinusoidal_table
from transformer_min.core.i18n import tr
from transformer_min.verify.printing import matrix_lines, row_sums_line, shape, weight_matrix
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("attention", "Scaled dot-product attention on the posts' demo", "3.2.1, eq. (1)"),)


# Post 002's check_attention runs eq. (1) alone on q, k, v of (batch, seq_len, d_k) = (2, 4, 8) and prints
# output (2, 4, 8) and weights (2, 4, 4): the first check of this stage does the same.
EQ1_BATCH, EQ1_SEQ_LEN, EQ1_D_K = 2, 4, 8


@register("attention.equation_1_alone", "attention", "3.2.1, eq. (1)",
          "Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V on its own: output (batch, seq_len, d_v), "
          "weights (batch, seq_len, seq_len), equal to the NumPy transcription", "EXACT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def equation_1_alone(ctx: Context) -> Result:
    g = torch.Generator().manual_seed(ctx.cfg.attention.seed)
    q, k, v = (torch.randn(EQ1_BATCH, EQ1_SEQ_LEN, EQ1_D_K, generator=g) for _ in range(3))
    out, w = attention.scaled_dot_product_attention(q, k, v)
    ref_out, ref_w = reference.attention(q.double().numpy(), k.double().numpy(), v.double().numpy())
    err = max(np.abs(out.numpy() - ref_out).max(), np.abs(w.numpy() - ref_w).max())
    dev = (w.sum(-1) - 1).abs().max().item()
    lines = [
        tr("eq. (1) alone: q, k, v (batch, seq_len, d_k) = {shape}").format(shape=shape(q)),
        tr("output  (batch, seq_len, d_v)     = {shape}").format(shape=shape(out)),
        tr("weights (batch, seq_len, seq_len) = {shape}").format(shape=shape(w)),
        row_sums_line(tr("weight row sums, sentence 0"), w[0].sum(-1)),
    ]
    return Result(err < 1e-5 and dev < 1e-5, tr("max abs diff vs NumPy {err}; max |row sum - 1| {dev}").format(err=fmt(err), dev=fmt(dev)),
                  "< 1e-5; < 1e-5", lines)


def demo(ctx: Context) -> dict:
    """[attention] demo: (batch, seq_len, d_model) + PE through h heads with seeded random weights."""

    def run():
        a = ctx.cfg.attention
        g = torch.Generator().manual_seed(a.seed)
        x = torch.randn(a.batch_size, a.seq_len, a.d_model, generator=g) + sinusoidal_table(a.seq_len, a.d_model)
        torch.manual_seed(a.seed)
        mha = attention.MultiHeadAttention(a.d_model, a.num_heads, a.d_k, a.d_v).eval()
        with torch.no_grad():
            out, w = mha(query=x, key=x, value=x, need_weights=True)  # (B, L, D), (B, H, L, L)
        return {"x": x, "mha": mha, "out": out, "weights": w}

    return ctx.memo("attention.demo", run)


def demo_lines(d: dict) -> list[str]:
    """What the demo prints: the posts' shapes with the batch axis (post 001) and for one sentence (post 000)."""
    x, out, w = d["x"], d["out"], d["weights"]
    mha = d["mha"]
    one = tr("sentence 0: {shape}")
    return [
        tr("[attention] demo: batch {b}, seq_len {l}, d_model {d}, h {h}, d_k {dk}, d_v {dv}").format(
            b=x.shape[0], l=x.shape[1], d=x.shape[2], h=mha.num_heads, dk=mha.d_k, dv=mha.d_v),
        tr("input   (batch, seq_len, d_model)    = {shape}").format(shape=shape(x))
        + "   " + one.format(shape=shape(x[0])),
        tr("scores  (batch, h, seq_len, seq_len) = {shape}").format(shape=shape(w)),
        tr("weights (batch, h, seq_len, seq_len) = {shape}").format(shape=shape(w))
        + "   " + one.format(shape=shape(w[0])),
        tr("output  (batch, seq_len, d_model)    = {shape}").format(shape=shape(out))
        + "   " + one.format(shape=shape(out[0])),
        *matrix_lines(tr("head 0 weights, sentence 0"), w[0, 0]),
        row_sums_line(tr("head 0 row sums"), w[0, 0].sum(-1)),
    ]


@register("attention.weights_rows_sum_to_one", "attention", "3.2.1, eq. (1)",
          "softmax over the key axis: every weight row sums to 1", "EXACT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def rows_sum_to_one(ctx: Context) -> Result:
    d = demo(ctx)
    w = d["weights"]
    dev = (w.sum(-1) - 1).abs().max().item()
    matrices = {f"head{h}": weight_matrix(w[0, h]) for h in range(w.shape[1])}
    return Result(dev < 1e-5, tr("max |row sum - 1| = {dev}").format(dev=fmt(dev)), "< 1e-5", demo_lines(d), matrices)


@register("attention.weights_in_unit_interval", "attention", "3.2.1, eq. (1)",
          "attention weights are probabilities in [0, 1]", "EXACT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def weights_in_range(ctx: Context) -> Result:
    w = demo(ctx)["weights"]
    lo, hi = w.min().item(), w.max().item()
    return Result(lo >= 0.0 and hi <= 1.0, tr("min {lo}, max {hi}").format(lo=fmt(lo), hi=fmt(hi)), tr("within [0, 1]"))


@register("attention.matches_numpy_reference", "attention", "3.2.1-3.2.2",
          "multi-head attention equals the NumPy transcription head by head", "EXACT",
          "transformer_min.model.attention.MultiHeadAttention")
def matches_numpy(ctx: Context) -> Result:
    d = demo(ctx)
    mha, x = d["mha"], d["x"].double().numpy()
    p = {n: t.detach().double().numpy() for n, t in mha.named_parameters()}
    ref_out, ref_w = reference.multi_head_attention(
        x, x, x, p["w_q.weight"].T, p["w_k.weight"].T, p["w_v.weight"].T, p["w_o.weight"].T,
        p["w_q.bias"], p["w_k.bias"], p["w_v.bias"], p["w_o.bias"], num_heads=mha.num_heads)
    err = max(np.abs(d["out"].numpy() - ref_out).max(), np.abs(d["weights"].numpy() - ref_w).max())
    return Result(err < 1e-4, tr("max abs diff {err} (float32 vs float64)").format(err=fmt(err)), "< 1e-4")


@register("attention.masked_weights_exactly_zero", "attention", "3.2.3",
          "illegal connections are set to -inf before the softmax: their weights are exactly 0", "EXACT",
          "transformer_min.model.attention.scaled_dot_product_attention")
def masked_exactly_zero(ctx: Context) -> Result:
    g = torch.Generator().manual_seed(ctx.cfg.attention.seed)
    T = ctx.cfg.attention.seq_len
    q, k, v = (torch.randn(2, 4, T, 16, generator=g) * 4 for _ in range(3))
    causal = masks.causal_mask(T)
    _, w = attention.scaled_dot_product_attention(q, k, v, causal)
    above = w.masked_select(~causal.expand_as(w))
    nonzero = int((above != 0).sum())
    row_dev = (w.sum(-1) - 1).abs().max().item()
    lines = matrix_lines(tr("causal mask, 1 = may attend"), causal, digits=None)
    return Result(nonzero == 0 and row_dev < 1e-5,
                  tr("{nonzero} non-zero weights above the diagonal; max |row sum - 1| {row_dev}").format(nonzero=nonzero, row_dev=fmt(row_dev)),
                  tr("0 non-zero; rows still sum to 1"), lines)


@register("attention.fully_masked_row_finite", "attention", "3.2.3",
          "a query row with every key masked gives finite output (0), also in float16/bfloat16", "ARCH",
          "transformer_min.model.attention.scaled_dot_product_attention")
def fully_masked_finite(ctx: Context) -> Result:
    bad = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(1, 2, 3, 8).to(dtype) for _ in range(3))
        mask = torch.ones(3, 3, dtype=torch.bool)
        mask[1] = False
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        if not (torch.isfinite(out).all() and torch.isfinite(w).all() and out[:, :, 1].abs().max() == 0):
            bad.append(str(dtype))
    return Result(not bad, tr("finite, zero output") if not bad else tr("non-finite in {bad}").format(bad=bad),
                  tr("finite, zero output in float32/16/bf16"))
