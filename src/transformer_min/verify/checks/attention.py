"""Stage `attention`: eq. (1) on the posts' demo input, section 3.2.1 and 3.2.3."""

from __future__ import annotations

import numpy as np
import torch

from transformer_min import attention, masks, reference
from transformer_min.embeddings import sinusoidal_table
from transformer_min.verify.registry import Context, Result, fmt, register, stage

stage("attention", "Scaled dot-product attention on the posts' demo", "3.2.1, eq. (1)")


def demo(ctx: Context) -> dict:
    """[attention] demo: (seq_len, d_model) + PE through h heads with seeded random weights."""

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


def _matrix_lines(m: torch.Tensor, digits: int) -> list[str]:
    return ["  " + " ".join(f"{v:.{digits}f}" for v in row) for row in m.tolist()]


@register("attention.weights_rows_sum_to_one", "attention", "3.2.1, eq. (1)",
          "softmax over the key axis: every weight row sums to 1", "EXACT",
          "transformer_min.attention.scaled_dot_product_attention")
def rows_sum_to_one(ctx: Context) -> Result:
    d = demo(ctx)
    w = d["weights"]
    dev = (w.sum(-1) - 1).abs().max().item()
    lines = [
        f"input  (seq_len, d_model) = {tuple(d['x'][0].shape)}  (batch of {d['x'].shape[0]})",
        f"output (seq_len, d_model) = {tuple(d['out'][0].shape)}",
        f"weights (h, seq_len, seq_len) = {tuple(w[0].shape)}",
        "head 0 weights (rounded to 3 decimals):",
        *_matrix_lines(w[0, 0], 3),
        "head 0 row sums: " + " ".join(f"{s:.6f}" for s in w[0, 0].sum(-1).tolist()),
    ]
    return Result(dev < 1e-5, f"max |row sum - 1| = {fmt(dev)}", "< 1e-5", lines)


@register("attention.weights_in_unit_interval", "attention", "3.2.1, eq. (1)",
          "attention weights are probabilities in [0, 1]", "EXACT",
          "transformer_min.attention.scaled_dot_product_attention")
def weights_in_range(ctx: Context) -> Result:
    w = demo(ctx)["weights"]
    lo, hi = w.min().item(), w.max().item()
    return Result(lo >= 0.0 and hi <= 1.0, f"min {fmt(lo)}, max {fmt(hi)}", "within [0, 1]")


@register("attention.matches_numpy_reference", "attention", "3.2.1-3.2.2",
          "multi-head attention equals the NumPy transcription head by head", "EXACT",
          "transformer_min.attention.MultiHeadAttention")
def matches_numpy(ctx: Context) -> Result:
    d = demo(ctx)
    mha, x = d["mha"], d["x"].double().numpy()
    p = {n: t.detach().double().numpy() for n, t in mha.named_parameters()}
    ref_out, ref_w = reference.multi_head_attention(
        x, x, x, p["w_q.weight"].T, p["w_k.weight"].T, p["w_v.weight"].T, p["w_o.weight"].T,
        p["w_q.bias"], p["w_k.bias"], p["w_v.bias"], p["w_o.bias"], num_heads=mha.num_heads)
    err = max(np.abs(d["out"].numpy() - ref_out).max(), np.abs(d["weights"].numpy() - ref_w).max())
    return Result(err < 1e-4, f"max abs diff {fmt(err)} (float32 vs float64)", "< 1e-4")


@register("attention.masked_weights_exactly_zero", "attention", "3.2.3",
          "illegal connections are set to -inf before the softmax: their weights are exactly 0", "EXACT",
          "transformer_min.attention.scaled_dot_product_attention")
def masked_exactly_zero(ctx: Context) -> Result:
    g = torch.Generator().manual_seed(ctx.cfg.attention.seed)
    T = ctx.cfg.attention.seq_len
    q, k, v = (torch.randn(2, 4, T, 16, generator=g) * 4 for _ in range(3))
    causal = masks.causal_mask(T)
    _, w = attention.scaled_dot_product_attention(q, k, v, causal)
    above = w.masked_select(~causal.expand_as(w))
    nonzero = int((above != 0).sum())
    row_dev = (w.sum(-1) - 1).abs().max().item()
    lines = ["causal mask (1 = may attend):", *["  " + " ".join(str(int(b)) for b in r) for r in causal.tolist()]]
    return Result(nonzero == 0 and row_dev < 1e-5,
                  f"{nonzero} non-zero weights above the diagonal; max |row sum - 1| {fmt(row_dev)}",
                  "0 non-zero; rows still sum to 1", lines)


@register("attention.fully_masked_row_finite", "attention", "3.2.3",
          "a query row with every key masked gives finite output (0), also in float16/bfloat16", "ARCH",
          "transformer_min.attention.scaled_dot_product_attention")
def fully_masked_finite(ctx: Context) -> Result:
    bad = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(1, 2, 3, 8).to(dtype) for _ in range(3))
        mask = torch.ones(3, 3, dtype=torch.bool)
        mask[1] = False
        out, w = attention.scaled_dot_product_attention(q, k, v, mask)
        if not (torch.isfinite(out).all() and torch.isfinite(w).all() and out[:, :, 1].abs().max() == 0):
            bad.append(str(dtype))
    return Result(not bad, "finite, zero output" if not bad else f"non-finite in {bad}",
                  "finite, zero output in float32/16/bf16")
