"""Stage `dropout`: where the residual dropout of section 5.4 sits, and where it does not.

"We apply dropout to the output of each sub-layer, before it is added to the sub-layer input and
normalized. In addition, we apply dropout to the sums of the embeddings and the positional
encodings in both the encoder and decoder stacks."

The checks run a layer in train mode with P_drop = 0.5 and read, through hooks, the sub-layer
output s and the input of the following LayerNorm. With dropout on the sub-layer output alone,
(norm input - residual) is, element by element, either exactly 0 (dropped) or s / (1 - p) (kept).
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_min.model.attention import MultiHeadAttention
from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.feed_forward import PositionwiseFeedForward
from transformer_min.model.build import decoder_layer, encoder_layer
from transformer_min.model.transformer import build_model
from transformer_min.verify.fixtures import tiny_batch, tiny_model
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("dropout", "Residual and embedding dropout", "5.4"),)

P = 0.5  # large, so that both kept and dropped elements are plentiful


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _classify(residual: torch.Tensor, sub_out: torch.Tensor, norm_in: torch.Tensor) -> tuple[float, float]:
    """-> (fraction dropped, max error of the kept elements against sub_out / (1 - p))."""
    delta = norm_in - residual
    dropped = delta == 0
    kept_err = (delta - sub_out / (1 - P))[~dropped].abs().max().item() if (~dropped).any() else float("inf")
    return dropped.float().mean().item(), kept_err


def _trace(layer: nn.Module, pairs: list[tuple[str, str]], run) -> dict:
    """Record outputs of sub-layer modules and inputs/outputs of the norms, then call run()."""
    rec, hooks = {}, []
    for sub, norm in pairs:
        sub_mod, norm_mod = getattr(layer, sub), getattr(layer, norm)
        hooks.append(sub_mod.register_forward_hook(lambda m, a, o, k=sub: rec.__setitem__(k, _first(o))))
        hooks.append(norm_mod.register_forward_pre_hook(lambda m, a, k=norm: rec.__setitem__(k + ".in", a[0])))
        hooks.append(norm_mod.register_forward_hook(lambda m, a, o, k=norm: rec.__setitem__(k + ".out", o)))
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return rec


def _residual_result(residuals: list, rec: dict, pairs: list[tuple[str, str]]) -> Result:
    lines, measured, ok = [], [], True
    for (sub, norm), res in zip(pairs, residuals):
        frac, err = _classify(res, rec[sub], rec[norm + ".in"])
        ok &= 0.3 < frac < 0.7 and err < 1e-9
        lines.append(tr("{norm} input - residual: {frac} exactly 0, the rest = {sub} output / (1 - p) within {err}"
                        ).format(norm=norm, frac=f"{frac:.0%}", sub=sub, err=fmt(err)))
        measured.append(tr("{sub}: {frac:.0%} zero, rest within {err}").format(sub=sub, frac=frac, err=fmt(err)))
    return Result(ok, "; ".join(measured),
                  tr("per sub-layer ~50% exactly 0 (p = 0.5), the rest = sub-layer output / (1 - p) (< 1e-9)"), lines)


@register("dropout.residual_encoder", "dropout", "5.4",
          "encoder: dropout on each sub-layer output, before it is added to the sub-layer input and "
          "normalised (not on the residual, not after the norm)", "ARCH",
          "transformer_min.model.layers.EncoderLayer.forward")
def residual_encoder(ctx: Context) -> Result:
    torch.manual_seed(0)
    layer = encoder_layer(16, 4, 32, dropout=P).double().train()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    pairs = [("self_attn", "norm1"), ("feed_forward", "norm2")]
    rec = _trace(layer, pairs, lambda: layer(x))
    return _residual_result([x, rec["norm1.out"]], rec, pairs)


@register("dropout.residual_decoder", "dropout", "5.4",
          "decoder: dropout on the output of all three sub-layers, before the add and norm", "ARCH",
          "transformer_min.model.layers.DecoderLayer.forward")
def residual_decoder(ctx: Context) -> Result:
    torch.manual_seed(0)
    layer = decoder_layer(16, 4, 32, dropout=P).double().train()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    memory = torch.randn(2, 5, 16, dtype=torch.float64)
    pairs = [("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3")]
    rec = _trace(layer, pairs, lambda: layer(x, memory, None, torch.ones(8, 8, dtype=torch.bool).tril()))
    return _residual_result([x, rec["norm1.out"], rec["norm2.out"]], rec, pairs)


@register("dropout.embeddings_plus_pe", "dropout", "5.4",
          "dropout on the sums of the embeddings and the positional encodings, in both stacks", "ARCH",
          "transformer_min.model.embeddings.PositionalBase.forward")
def embeddings_plus_pe(ctx: Context) -> Result:
    model = tiny_model(dropout=P).double().train()
    src, tgt = tiny_batch()
    seen = {}
    hooks = [model.encoder.layers[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("enc", a[0])),
             model.decoder.layers[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("dec", a[0]))]
    try:
        model(src, tgt)
    finally:
        for h in hooks:
            h.remove()
    lines, measured, ok = [], [], True
    with torch.no_grad():
        for name, tokens, emb, pos in (("encoder", src, model.src_embed, model.src_pos),
                                       ("decoder", tgt, model.tgt_embed, model.tgt_pos)):
            total = emb(tokens) + pos.positions(tokens.shape[1], 0)  # embedding * sqrt(d) + PE
            got = seen[name[:3]]
            dropped = got == 0
            err = (got - total / (1 - P))[~dropped].abs().max().item()
            frac = dropped.float().mean().item()
            ok &= 0.3 < frac < 0.7 and err < 1e-9
            lines.append(tr("{name} stack input: {frac} exactly 0, the rest = (embedding + PE) / (1 - p) within {err}"
                            ).format(name=name, frac=f"{frac:.0%}", err=fmt(err)))
            measured.append(tr("{name}: {frac:.0%} zero, rest within {err}").format(name=name, frac=frac, err=fmt(err)))
    return Result(ok, "; ".join(measured),
                  tr("~50% exactly 0 (p = 0.5), the rest = (embedding + PE) / (1 - p) (< 1e-9)"), lines)


@register("dropout.only_where_the_paper_puts_it", "dropout", "5.4",
          "P_drop = 0.1 only on sub-layer outputs and embedding + PE sums; attention dropout and ReLU "
          "dropout (not in the paper) default to 0", "ARCH",
          "transformer_min.model.transformer.build_model")
def only_paper_dropout(ctx: Context) -> Result:
    m = ModelConfig()
    with torch.device("meta"):
        model = build_model(Config(model=m, vocab=VocabConfig(src_size=100, tgt_size=100)))
    active = sorted(n for n, mod in model.named_modules() if isinstance(mod, nn.Dropout) and mod.p > 0)
    want = sorted(["src_pos.dropout", "tgt_pos.dropout"]
                  + [f"{s}.layers.{i}.dropout" for s in ("encoder", "decoder") for i in range(m.num_layers)])
    p_values = {mod.p for n, mod in model.named_modules() if n in active}
    attn = {mod.dropout for mod in model.modules() if isinstance(mod, MultiHeadAttention)}
    relu = {mod.dropout.p for mod in model.modules() if isinstance(mod, PositionwiseFeedForward)}
    ok = active == want and p_values == {0.1} and attn == {0.0} and relu == {0.0} and m.attention_dropout == 0.0
    lines = [tr("dropout modules with p > 0: {n} (2 embedding + PE sums, one per layer for its sub-layers)").format(
        n=len(active))]
    return Result(ok, tr("{n_active} residual/embedding dropouts at p {sorted}; attention p {sorted2}; ReLU p {sorted3}").format(n_active=len(active), sorted=sorted(p_values), sorted2=sorted(attn), sorted3=sorted(relu)), tr("{n_want} at p [0.1]; attention p [0.0]; ReLU p [0.0]").format(n_want=len(want)), lines)
