"""Stage `architecture`: the paper's dimensions and the wiring of Figure 1 (sections 3, 3.1, 3.2.3).

Checks about the code's paper defaults build the tiny seeded model of `verify.fixtures` (`tiny_model`) with
everything else at the paper's setting, so they stay fast whatever [model] config.toml holds.
"""

from __future__ import annotations

import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.transformer import build_model
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, register
from transformer_min.verify.fixtures import full_batch, full_model, tiny_batch, tiny_model

STAGES = (Stage("architecture", "Architecture: dimensions and wiring", "3, 3.1"),)

@register("architecture.base_dimensions", "architecture", "3, 3.2.2, 3.3",
          "the defaults are the base model: N = 6, d_model = 512, h = 8, d_k = d_v = 64, d_ff = 2048, "
          "P_drop = 0.1, and the built modules have these shapes", "EXACT",
          "transformer_min.core.config.ModelConfig")
def base_dimensions(ctx: Context) -> Result:
    m = ModelConfig()
    got = dict(N=m.num_layers, d_model=m.d_model, h=m.num_heads, d_k=m.head_dim_k, d_v=m.head_dim_v,
               d_ff=m.d_ff, P_drop=m.dropout)
    want = dict(N=6, d_model=512, h=8, d_k=64, d_v=64, d_ff=2048, P_drop=0.1)
    with torch.device("meta"):
        model = build_model(Config(model=m, vocab=VocabConfig(src_size=100, tgt_size=100)))
    layer = model.encoder.layers[0]
    shapes = dict(N=(len(model.encoder.layers), len(model.decoder.layers)),
                  W_Q=tuple(layer.self_attn.w_q.weight.T.shape), W_O=tuple(layer.self_attn.w_o.weight.T.shape),
                  W_1=tuple(layer.feed_forward.w_1.weight.T.shape), W_2=tuple(layer.feed_forward.w_2.weight.T.shape))
    want_shapes = dict(N=(6, 6), W_Q=(512, 512), W_O=(512, 512), W_1=(512, 2048), W_2=(2048, 512))
    lines = [f"{k} = {v}" for k, v in got.items()] + [f"{k}: {v}" for k, v in shapes.items()]
    ok = got == want and shapes == want_shapes
    return Result(ok, ", ".join(f"{k} {v}" for k, v in got.items()),
                  ", ".join(f"{k} {v}" for k, v in want.items()), lines)


@register("architecture.sublayer_outputs_d_model", "architecture", "3.1",
          "every sub-layer and embedding output has d_model features ([model] sizes)", "EXACT",
          "transformer_min.model.transformer.Transformer.forward")
def sublayer_outputs(ctx: Context) -> Result:
    model, (src, tgt) = full_model(ctx), full_batch(ctx)
    d = ctx.cfg.model.d_model
    seen: dict[str, tuple] = {}
    hooks = []
    named = [("src_pos", model.src_pos), ("tgt_pos", model.tgt_pos)]
    for i, layer in enumerate(model.encoder.layers):
        named += [(f"encoder.{i}.self_attn", layer.self_attn), (f"encoder.{i}.feed_forward", layer.feed_forward)]
    for i, layer in enumerate(model.decoder.layers):
        named += [(f"decoder.{i}.self_attn", layer.self_attn), (f"decoder.{i}.cross_attn", layer.cross_attn),
                  (f"decoder.{i}.feed_forward", layer.feed_forward)]
    for name, module in named:
        def hook(mod, args, out, name=name):
            seen[name] = tuple((out[0] if isinstance(out, tuple) else out).shape)
        hooks.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(src, tgt)
    finally:
        for h in hooks:
            h.remove()
    bad = {k: v for k, v in seen.items() if v[-1] != d}
    lines = [tr("{n} sub-layer/embedding outputs, e.g. encoder.0.feed_forward {ffn}, decoder.0.cross_attn {cross}"
                ).format(n=len(seen), ffn=seen.get("encoder.0.feed_forward"), cross=seen.get("decoder.0.cross_attn"))]
    return Result(not bad and len(seen) == len(named), tr("{n_seen}/{n_named} outputs end in {d}").format(n_seen=len(seen) - len(bad), n_named=len(named), d=d),
                  tr("all {n_named} end in d_model = {d}").format(n_named=len(named), d=d), lines)


@register("architecture.no_final_layernorm", "architecture", "3.1",
          "post-norm: each sub-layer output is LayerNorm(x + Sublayer(x)); no extra LayerNorm after the "
          "last layer of either stack (torch.nn.Transformer adds one)", "ARCH",
          "transformer_min.model.transformer.Encoder.forward")
def no_final_layernorm(ctx: Context) -> Result:
    model = tiny_model()
    src, tgt = tiny_batch()
    caught = {}
    hooks = [model.encoder.layers[-1].norm2.register_forward_hook(lambda m, a, o: caught.__setitem__("enc", o)),
             model.decoder.layers[-1].norm3.register_forward_hook(lambda m, a, o: caught.__setitem__("dec", o))]
    try:
        with torch.no_grad():
            memory, _ = model.encode(src)
            hidden, _, _ = model.decode(tgt, memory, None, None)
    finally:
        for h in hooks:
            h.remove()
    same = torch.equal(memory, caught["enc"]) and torch.equal(hidden, caught["dec"])
    finals = (model.encoder.final_norm, model.decoder.final_norm)
    n_norms = sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    want_norms = 2 * 2 + 3 * 2  # N = 2: two per encoder layer, three per decoder layer
    ok = same and finals == (None, None) and n_norms == want_norms
    return Result(ok, tr("stack outputs = last layers' Add & Norm: {same}; final norms {finals}; {n_norms} LayerNorms at N = 2").format(same=same, finals=finals, n_norms=n_norms), tr("True; (None, None); {want_norms}").format(want_norms=want_norms))


@register("architecture.cross_attention_reads_encoder_top", "architecture", "3.2.3",
          "encoder-decoder attention: K and V from the top of the encoder stack, Q from the decoder "
          "layer below; every decoder layer sees the same encoder output", "ARCH",
          "transformer_min.model.layers.DecoderLayer._mha_block")
def cross_attention_memory(ctx: Context) -> Result:
    model = tiny_model()
    src, tgt = tiny_batch()
    calls = []
    hooks = [layer.cross_attn.register_forward_pre_hook(
        lambda m, args, kwargs: calls.append((kwargs["query"], kwargs["key"], kwargs["value"])), with_kwargs=True)
        for layer in model.decoder.layers]
    below = []
    hooks += [layer.norm1.register_forward_hook(lambda m, a, o: below.append(o)) for layer in model.decoder.layers]
    try:
        with torch.no_grad():
            model(src, tgt)
            memory, _ = model.encode(src, None)
    finally:
        for h in hooks:
            h.remove()
    kv_top = all(torch.equal(k, memory) and torch.equal(v, memory) for _, k, v in calls)
    q_below = all(q is b for (q, _, _), b in zip(calls, below))
    ok = len(calls) == len(model.decoder.layers) and kv_top and q_below
    return Result(ok, tr("{n_calls} cross-attentions; K, V = encoder output: {kv_top}; Q = output of the masked self-attention sub-layer: {q_below}").format(n_calls=len(calls), kv_top=kv_top, q_below=q_below), tr("all True"))


@register("architecture.decoder_input_shifted_right", "architecture", "3",
          "the decoder is auto-regressive: its input is the output shifted right by one (BOS first)", "ARCH",
          "transformer_min.data.batch.make_batch")
def shifted_right(ctx: Context) -> Result:
    from transformer_min.data.batch import make_batch

    v = ctx.cfg.vocab
    pairs = [([5, 6, 7], [8, 9, 10, 11]), ([5], [12])]
    b = make_batch(pairs, v.bos_id, v.eos_id, v.pad_id)
    real = b.tgt_out != v.pad_id
    shifted = torch.equal(b.tgt_in[:, 1:][real[:, 1:]], b.tgt_out[:, :-1][real[:, 1:]])
    bos = bool((b.tgt_in[:, 0] == v.bos_id).all())
    lines = [tr("target y = {y}: decoder input {given}, predicted {predicted}").format(
        y=pairs[0][1], given=b.tgt_in[0].tolist(), predicted=b.tgt_out[0].tolist())]
    return Result(shifted and bos, tr("tgt_in[1:] == tgt_out[:-1]: {shifted}; tgt_in[0] == BOS: {bos}").format(shifted=shifted, bos=bos),
                  tr("True; True"), lines)
