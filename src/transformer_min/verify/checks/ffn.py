"""Stage `ffn`: the position-wise feed-forward network, section 3.3, eq. (2)."""

from __future__ import annotations

import torch
from torch import nn

from transformer_min.model import feed_forward
from transformer_min.core.config import ModelConfig
from transformer_min.verify.base import Context, Result, Stage, fmt, register
from transformer_min.core.i18n import tr

STAGES = (Stage("ffn", "Position-wise feed-forward network", "3.3, eq. (2)"),)

D_MODEL, D_FF = 16, 64  # small and fast; eq. (2) does not depend on the sizes


def _setup(ctx: Context) -> dict:
    def run():
        torch.manual_seed(ctx.cfg.verify.seed)
        ffn = feed_forward.PositionwiseFeedForward(D_MODEL, D_FF).double().eval()
        with torch.no_grad():  # non-zero biases, so b1 and b2 are tested too
            ffn.w_1.bias.normal_()
            ffn.w_2.bias.normal_()
        g = torch.Generator().manual_seed(ctx.cfg.verify.seed)
        x = torch.randn(3, 9, D_MODEL, generator=g, dtype=torch.float64)  # (B, L, D)
        with torch.no_grad():
            out = ffn(x)
        return {"ffn": ffn, "x": x, "out": out}
    return ctx.memo("ffn.setup", run)


@register("ffn.equation_2", "ffn", "3.3, eq. (2)",
          "FFN(x) = max(0, x W1 + b1) W2 + b2", "EXACT",
          "transformer_min.model.feed_forward.PositionwiseFeedForward")
def equation_2(ctx: Context) -> Result:
    s = _setup(ctx)
    ffn, x = s["ffn"], s["x"]
    W1, b1 = ffn.w_1.weight.T.detach(), ffn.w_1.bias.detach()  # x W1 convention: W1 (D, d_ff)
    W2, b2 = ffn.w_2.weight.T.detach(), ffn.w_2.bias.detach()
    by_hand = torch.clamp(x @ W1 + b1, min=0.0) @ W2 + b2  # max(0, x W1 + b1) W2 + b2
    err = (s["out"] - by_hand).abs().max().item()
    return Result(err < 1e-12, tr("max abs diff {err} (float64)").format(err=fmt(err)), "< 1e-12")


@register("ffn.position_wise", "ffn", "3.3",
          "applied to each position separately and identically: permuting positions commutes with the FFN",
          "EXACT", "transformer_min.model.feed_forward.PositionwiseFeedForward")
def position_wise(ctx: Context) -> Result:
    s = _setup(ctx)
    ffn, x = s["ffn"], s["x"]
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        err = (ffn(x[:, perm]) - s["out"][:, perm]).abs().max().item()
        single = max((ffn(x[:, i : i + 1]) - s["out"][:, i : i + 1]).abs().max().item() for i in range(x.shape[1]))
    return Result(err < 1e-12 and single < 1e-12,
                  tr("FFN(permuted x) vs permuted FFN(x): {err}; one position alone: {single}").format(err=fmt(err), single=fmt(single)),
                  tr("< 1e-12 (float64)"))


@register("ffn.equals_two_conv1d", "ffn", "3.3",
          "equals two convolutions with kernel size 1 (torch.nn.Conv1d with copied weights, ReLU between)",
          "EXACT", "transformer_min.model.feed_forward.PositionwiseFeedForward")
def equals_conv(ctx: Context) -> Result:
    s = _setup(ctx)
    ffn, x = s["ffn"], s["x"]
    conv1 = nn.Conv1d(D_MODEL, D_FF, kernel_size=1).double()
    conv2 = nn.Conv1d(D_FF, D_MODEL, kernel_size=1).double()
    with torch.no_grad():
        conv1.weight.copy_(ffn.w_1.weight[:, :, None])  # (d_ff, D) -> (d_ff, D, 1)
        conv1.bias.copy_(ffn.w_1.bias)
        conv2.weight.copy_(ffn.w_2.weight[:, :, None])
        conv2.bias.copy_(ffn.w_2.bias)
        y = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)  # Conv1d wants (B, D, L)
    err = (y - s["out"]).abs().max().item()
    return Result(err < 1e-12, tr("max abs diff {err} (float64)").format(err=fmt(err)), "< 1e-12")


@register("ffn.inner_dimension", "ffn", "3.3",
          "base model: d_model = 512 -> d_ff = 2048 -> d_model = 512", "EXACT",
          "transformer_min.model.feed_forward.PositionwiseFeedForward")
def inner_dimension(ctx: Context) -> Result:
    m = ModelConfig()
    with torch.device("meta"):
        ffn = feed_forward.PositionwiseFeedForward(m.d_model, m.d_ff)
        out = ffn(torch.empty(1, 3, m.d_model))
    got = (ffn.w_1.in_features, ffn.w_1.out_features, ffn.w_2.out_features, out.shape[-1])
    return Result(got == (512, 2048, 512, 512), "%d -> %d -> %d (output %d)" % got, tr("512 -> 2048 -> 512 (output 512)"))
