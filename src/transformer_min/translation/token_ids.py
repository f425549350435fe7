"""`tmin decode`: token ids in, token ids out, for any checkpoint (the copy and reverse tasks included);
greedy decoding or the beam search of section 6.1, and the last layer's cross-attention (section 3.2.3)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_min.core.errors import ConfigError
from transformer_min.translation.translate import Overrides
from transformer_min.core.i18n import tr


@dataclass
class Decoded:
    """The source ids (EOS appended), the output ids (no BOS, cut before EOS), the checkpoint's EOS id and,
    when asked for, the cross-attention of the last decoder layer per head (H, T, S)."""

    source: list[int]
    output: list[int]
    eos_id: int
    heads: torch.Tensor | None = None


def parse_ids(tokens: str) -> list[int]:
    """'3 5 7' or '3,5,7' -> [3, 5, 7]; anything else is an error naming the argument."""
    try:
        ids = [int(t) for t in tokens.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(tr("tokens: expected space-separated integers, got {tokens!r}").format(tokens=tokens)) from None
    if not ids:
        raise ConfigError(tr("tokens: give at least one token id"))
    return ids


def decode_tokens(checkpoint: str, tokens: str, beam: int | None = None, alpha: float | None = None,
                  overrides: Overrides | None = None, attention: bool = False) -> Decoded:
    """Decode one source sequence with a checkpoint: greedy unless beam > 1 (then decode.search with
    alpha, default decode.length_penalty); EOS is appended when the ids do not end with it."""
    from transformer_min.decoding.search import beam_search, check_beam, cross_attention_heads, greedy_decode, strip
    from transformer_min.model.saved import load_model

    ids = parse_ids(tokens)
    model, cfg = load_model(checkpoint)
    cfg = overrides(cfg) if overrides else cfg
    v = cfg.vocab
    bad = [i for i in ids if not 0 <= i < v.src_size or i in (v.pad_id, v.bos_id)]
    if bad:
        raise ConfigError(tr("tokens: id {bad} is not a source symbol (valid: 0..{src_size}, not pad {pad_id} or bos {bos_id})").format(bad=bad[0], src_size=v.src_size - 1, pad_id=v.pad_id, bos_id=v.bos_id))
    if ids[-1] != v.eos_id:
        ids.append(v.eos_id)
    src = torch.tensor([ids])  # (1, S)
    if beam and beam > 1:
        check_beam(beam, v.tgt_size)
        a = cfg.decode.length_penalty if alpha is None else alpha
        out = beam_search(model, src, v.bos_id, v.eos_id, v.pad_id, beam, a, cfg.decode.max_len_offset,
                          search=cfg.decode.search)
    else:
        out = greedy_decode(model, src, v.bos_id, v.eos_id, v.pad_id, cfg.decode.max_len_offset)
    result = Decoded(ids, strip(out, v.eos_id, v.pad_id)[0], v.eos_id)
    if attention:
        result.heads = cross_attention_heads(model, src, result.output, v.bos_id, v.eos_id)  # (H, T, S)
    return result
