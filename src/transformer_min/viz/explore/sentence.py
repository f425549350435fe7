"""One sentence through the model: the beam-search translation (section 6.1) and every attention weight of
the encoder self-attention, the decoder's masked self-attention and the encoder-decoder attention (section
3.2.3), per layer and head and averaged over heads; and eq. (1) step by step inside one attention module."""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.decoding.search import beam_search, check_beam, strip
from transformer_min.model.masks import causal_mask
from transformer_min.viz.explore.equation import Projections, multi_head_steps
from transformer_min.viz.explore.session import Session, max_source_tokens
from transformer_min.viz.explore.tensors import ExploreInputError, pack
from transformer_min.core.i18n import tr

KINDS = ("encoder", "decoder_self", "cross")


def source_ids(s: Session, text: str) -> list[int]:
    """The sentence's source ids (no EOS), or an ExploreInputError (empty, unknown tokens, too long)."""
    ids = s.vocab.encode(text, normalized=text in s.examples)
    limit = max_source_tokens(s.cfg)
    if len(ids) > limit:
        raise ExploreInputError(tr("sentence: {n_ids} tokens, more than the {limit} this page takes (model.max_len = {max_len} with EOS, at most {limit}); fix: shorten it").format(n_ids=len(ids), limit=limit, max_len=s.cfg.model.max_len))
    return ids


@torch.no_grad()
def decode(s: Session, ids: list[int]) -> tuple[Tensor, Tensor]:
    """Beam search with the run's [decode] settings -> src (1, S) with EOS, decoder input (1, T) = BOS + output.

    With random weights the search mostly ends at once (EOS first), which leaves nothing to look at: the
    decoder is fed the reverse task's target instead (teacher forcing; `decoded_by` says so)."""
    v, d = s.cfg.vocab, s.cfg.decode
    src = torch.tensor([[*ids, v.eos_id]])
    if s.random:
        return src, torch.tensor([[v.bos_id, *ids[::-1]]])
    beam = min(d.beam_size, v.tgt_size)
    check_beam(beam, v.tgt_size, "decode.beam_size")
    out = beam_search(s.model, src, v.bos_id, v.eos_id, v.pad_id, beam, d.length_penalty, d.max_len_offset,
                      search=d.search)
    return src, torch.tensor([[v.bos_id, *strip(out, v.eos_id, v.pad_id)[0]]])


def decoded_by(s: Session) -> str:
    return tr("teacher forcing: the reversed source (random weights)") if s.random else tr("beam search")


def translate(s: Session, text: str) -> dict:
    """The page data of a sentence: tokens, translation, attention per kind, layer and head, and head means."""
    ids = source_ids(s, text)
    with s.lock, torch.no_grad():
        src, tgt = decode(s, ids)
        _, att = s.model(src, tgt, return_attention=True)
    output = tgt[0, 1:].tolist()
    labels = [s.vocab.label(i) for i in output]
    text_out = " ".join(labels) if s.vocab.tokenizer is None else s.vocab.tokenizer.decode([output])[0]
    weights = dict(zip(KINDS, att))  # kind -> [(1, H, Lq, Lk)] * N
    return {
        "sentence": text, "decoded_by": decoded_by(s),
        "source": {"ids": src[0].tolist(), "labels": [s.vocab.label(i) for i in src[0].tolist()]},
        "target": {"ids": output, "text": text_out, "in_labels": [s.vocab.label(s.cfg.vocab.bos_id), *labels],
                   "out_labels": [*labels, s.vocab.label(s.cfg.vocab.eos_id)]},
        "attention": {k: [[pack(h) for h in w[0]] for w in ws] for k, ws in weights.items()},  # (Lq, Lk) each
        "mean": {k: [pack(w[0].mean(0)) for w in ws] for k, ws in weights.items()},  # averaged over heads
    }


def attention_module(model, kind: str, layer: int):
    """The MultiHeadAttention of `kind` in layer `layer` (encoder self, decoder self, or cross)."""
    stack = model.encoder if kind == "encoder" else model.decoder
    if not 0 <= layer < len(stack.layers):
        raise ExploreInputError(tr("layer = {layer}: this model has layers 0..{n_layers}").format(layer=layer, n_layers=len(stack.layers) - 1))
    return getattr(stack.layers[layer], "cross_attn" if kind == "cross" else "self_attn")


def _module_inputs(model, module, src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
    """The query input (1, Lq, D) and key/value input (1, Lk, D) `module` receives in a forward pass."""
    seen: list[tuple[Tensor, Tensor]] = []

    def hook(_mod, args, kwargs):
        given = list(args) + [kwargs.get(n) for n in ("query", "key", "value")[len(args):]]
        seen.append((given[0], given[1]))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(src, tgt)
    finally:
        handle.remove()
    return seen[0]


def model_equation(s: Session, text: str, kind: str, layer: int, scale: bool, causal: bool) -> dict:
    """Eq. (1) step by step in one attention module of the model, for a sentence and its translation.

    The decoder self-attention is causal in the model (section 3.2.3); `causal` adds the mask elsewhere."""
    ids = source_ids(s, text)
    with s.lock, torch.no_grad():
        src, tgt = decode(s, ids)
        module = attention_module(s.model, kind, layer)
        x_q, x_kv = (t[0].float() for t in _module_inputs(s.model, module, src, tgt))  # (Lq, D), (Lk, D)
        lq, lk = x_q.size(0), x_kv.size(0)
        if causal and kind == "cross":
            raise ExploreInputError(tr("causal: the cross-attention's queries are target positions and its keys source positions; the causal mask is for self-attention (section 3.2.3)"))
        mask = causal_mask(lq) if causal else torch.ones(lq, lk, dtype=torch.bool)
        qkv, combo = multi_head_steps(x_q, x_kv, Projections.of_module(module), module.num_heads, scale, mask)
    src_labels = [s.vocab.label(i) for i in src[0].tolist()]
    tgt_labels = [s.vocab.label(i) for i in tgt[0].tolist()]
    q_labels, k_labels = (src_labels, src_labels) if kind == "encoder" else (
        (tgt_labels, tgt_labels) if kind == "decoder_self" else (tgt_labels, src_labels))
    shared = {"X": pack(x_q), **({"X_kv": pack(x_kv)} if kind == "cross" else {}),
              **{n: pack(t) for n, t in qkv.items()}}
    return {"source": "model", "sentence": text, "kind": kind, "layer": layer, "causal": causal,
            "q_labels": q_labels, "k_labels": k_labels, "shared": shared, "combo": combo}
