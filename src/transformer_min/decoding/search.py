"""Decoding, section 6.1: greedy and beam search (beam 4, length penalty alpha 0.6, max length
input + 50), batched over sentences, with incremental decoding through a key/value cache. The beam
search is tensor2tensor's (the code behind the paper's results): alive and finished hypotheses kept
apart, with its early-stopping bound (decoding/scores.py); the earlier search is search="slots" (decoding/slots.py).

The search works on a `Stepper` (decoding/stepper.py: `step(prefix) -> log-probs of the next token`,
`reorder(index)`), so it is tested against a scripted fake model as well as the real one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.decoding.lean import LeanStepper
from transformer_min.decoding.scores import (  # noqa: F401 (early_stop: re-exported)
    best_extensions, cannot_win, early_stop, length_penalty)
from transformer_min.decoding.slots import slots_search
from transformer_min.decoding.stepper import Stepper, TransformerStepper
from transformer_min.decoding.t2t_one import t2t_one
from transformer_min.core.i18n import tr
from transformer_min.model.inference import InferenceWeights


def max_output_lengths(src: Tensor, pad_id: int, offset: int) -> Tensor:
    """Section 6.1: maximum output length = input length + offset, per sentence. src (B, S) -> (B,)."""
    return (src != pad_id).sum(-1) + offset


@torch.no_grad()
def greedy_search(stepper: Stepper, batch_size: int, bos_id: int, eos_id: int, pad_id: int,
                  max_lengths: Tensor, return_logprobs: bool = False):
    """Pick the most probable token each step until EOS or the per-sentence maximum length.

    A sentence that has finished is dropped from the stepper (`reorder` with fewer rows), so no step is
    spent on it; with return_logprobs every row is kept and stepped to the end.
    Returns tokens (B, L) without BOS, padded with pad after EOS (and the per-step log-probs
    [(B, V)] * L if asked).
    """
    device = max_lengths.device
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    act = torch.arange(batch_size, device=device)  # the sentences whose rows the stepper holds, in its order
    steps = []
    for t in range(int(max_lengths.max())):
        if return_logprobs:
            logp = stepper.step(ys)  # (B, V)
            steps.append(logp)
            nxt = logp.argmax(-1).masked_fill(finished, pad_id)  # (B,)
        else:
            nxt = torch.full((batch_size,), pad_id, dtype=torch.long, device=device)
            nxt[act] = stepper.step(ys[act]).argmax(-1)  # (A,)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        finished |= (nxt == eos_id) | (t + 1 >= max_lengths)
        if finished.all():
            break
        going = ~finished[act]
        if not return_logprobs and not going.all():
            stepper.reorder(going.nonzero().squeeze(1))
            act = act[going]
    return (ys[:, 1:], steps) if return_logprobs else ys[:, 1:]


SEARCHES = ("t2t", "slots")


@torch.no_grad()
def beam_search_steps(stepper: Stepper, batch_size: int, bos_id: int, eos_id: int, pad_id: int,
                      max_lengths: Tensor, beam_size: int = 4, alpha: float = 0.6,
                      search: str = "t2t", one_row_first: bool = False) -> tuple[Tensor, Tensor]:
    """Beam search (section 6.1: beam 4, alpha 0.6, at most input + 50 tokens), batched over sentences
    (rows = B * beam; with `one_row_first`, search t2t, the stepper starts with one row per sentence, since the K
    beams are one BOS before the first step, and is widened to K rows by its first `reorder`). Returns the best
    hypothesis per sentence (B, L) (pad after EOS) and its score log P / lp(|Y|) (B,).

    search = "t2t" (the paper's, tensor2tensor's beam_search.py): K alive hypotheses and up to K
    finished ones are kept apart, so a hypothesis that ends never takes an alive slot. Each step the 2K
    best extensions of the alive ones are split: those ending in EOS compete with the finished set by
    score, the K best of the others stay alive. A sentence stops at its maximum length or when
    `early_stop` holds. The best finished hypothesis wins; if none finished, the best alive one.

    search = "slots" (this project's earlier search): finished hypotheses stay in the K slots, ranked
    against the live ones by score, so each one that ends narrows the live beam; a hypothesis that
    reaches the maximum length counts as finished; stops when every slot has finished.
    """
    if search not in SEARCHES:
        raise ValueError(tr("search: expected one of {SEARCHES}, got {search!r}").format(SEARCHES=SEARCHES, search=search))
    if search == "slots":
        return slots_search(stepper, batch_size, bos_id, eos_id, pad_id, max_lengths, beam_size, alpha)
    return _t2t_search(stepper, batch_size, bos_id, eos_id, pad_id, max_lengths, beam_size, alpha, one_row_first)


def _t2t_start(B: int, K: int, L: int, bos_id: int, pad_id: int, device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The t2t search's state before its first step: alive and finished hypotheses in pad-filled buffers of their
    final width (B, K, L + 1) (column 0 holds BOS in alive; step t writes column t + 1), their log P (B, K)
    (one alive beam at 0: all beams start identical) and scores (B, K) (-inf: an empty finished slot)."""
    alive = torch.full((B, K, L + 1), pad_id, dtype=torch.long, device=device)
    alive[:, :, 0] = bos_id
    alive_logp = torch.full((B, K), float("-inf"), device=device)
    alive_logp[:, 0] = 0.0
    fin = torch.full((B, K, L + 1), pad_id, dtype=torch.long, device=device)
    return alive, alive_logp, fin, torch.full((B, K), float("-inf"), device=device)


def _t2t_split(alive: Tensor, fin: Tensor, fin_score: Tensor, top: Tensor, beam: Tensor, token: Tensor, t: int,
               eos_id: int, alpha: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Step t's 2K best extensions (scores `top`, of alive hypothesis `beam` by `token`, (A, 2K)) split: the K best
    that did not end stay alive, those that ended compete with the finished ones by score. -> alive (A, K, t + 2),
    their log P (A, K), finished (A, K, t + 2), their scores (A, K), and which of the 2K each alive one is."""
    ninf, K, w = float("-inf"), alive.size(1), t + 2
    seqs = alive[..., :w].gather(1, beam[..., None].expand(-1, -1, w))  # (A, 2K, t + 2), column t + 1 pad
    seqs[..., t + 1] = token
    ended = token == eos_id
    new_logp, keep = top.masked_fill(ended, ninf).topk(K, dim=-1)  # the K best that did not end
    scores = torch.cat([fin_score, top.masked_fill(~ended, ninf) / length_penalty(t + 1, alpha)], 1)
    new_fin_score, pick = scores.topk(K, dim=-1)  # finished so far and just now: the K best
    new_alive = seqs.gather(1, keep[..., None].expand(-1, -1, w))  # (A, K, t + 2)
    new_fin = torch.cat([fin[..., :w], seqs], 1).gather(1, pick[..., None].expand(-1, -1, w))
    return new_alive, new_logp, new_fin, new_fin_score, keep


def _t2t_search(stepper: Stepper, B: int, bos_id: int, eos_id: int, pad_id: int, max_lengths: Tensor,
                K: int, alpha: float, one_row_first: bool = False) -> tuple[Tensor, Tensor]:
    """One sentence (batch 1): its bookkeeping in Python (decoding/t2t_one.py: the same search, the same float32
    arithmetic; a batch-1 decoding took 0.93-0.94 of the time); more: in tensors, over every sentence at once."""
    if B == 1:
        lp_max = float(length_penalty(max_lengths.to(torch.get_default_dtype()), alpha)[0])
        return t2t_one(stepper, bos_id, eos_id, pad_id, int(max_lengths[0]), lp_max, K, alpha, one_row_first,
                       max_lengths.device, length_penalty)
    return _t2t_batched(stepper, B, bos_id, eos_id, pad_id, max_lengths, K, alpha, one_row_first)


def _t2t_batched(stepper: Stepper, B: int, bos_id: int, eos_id: int, pad_id: int, max_lengths: Tensor,
                 K: int, alpha: float, one_row_first: bool = False) -> tuple[Tensor, Tensor]:
    device, ninf, L = max_lengths.device, float("-inf"), int(max_lengths.max())
    alive, alive_logp, fin, fin_score = _t2t_start(B, K, L, bos_id, pad_id, device)
    act = None  # the sentences still searched (their K rows each are the stepper's rows); None: all B of them
    lp_max, base, base_of = length_penalty(max_lengths.to(alive_logp.dtype), alpha), None, None  # lp_max: once
    t = -1
    for t in range(L):
        a_alive, a_logp, a_fin, a_fin_score, limits, a_lp_max = (
            (alive, alive_logp, fin, fin_score, max_lengths, lp_max) if act is None
            else (alive[act], alive_logp[act], fin[act], fin_score[act], max_lengths[act], lp_max[act]))
        A, w = a_alive.size(0), t + 2  # the width after this step
        rows = 1 if one_row_first and t == 0 else K  # the stepper's rows per sentence
        logp = stepper.step(a_alive[:, :rows, :t + 1].reshape(A * rows, t + 1)).view(A, rows, -1)  # (A, rows, V)
        V = logp.size(-1)
        top, idx = best_extensions(stepper, logp, a_logp, K)  # (A, 2K): enough to keep K alive
        beam = idx // V
        new_alive, new_logp, new_fin, new_fin_score, keep = _t2t_split(a_alive, a_fin, a_fin_score, top, beam,
                                                                       idx % V, t, eos_id, alpha)
        if act is None:
            alive[..., :w], fin[..., :w], alive_logp, fin_score = new_alive, new_fin, new_logp, new_fin_score
        else:
            alive[act, :, :w], fin[act, :, :w] = new_alive, new_fin
            alive_logp[act], fin_score[act] = new_logp, new_fin_score
        # only the best finished hypothesis is returned: stop once no alive one can beat it (`early_stop` on the
        # best finished one; t2t's bound on its worst would run on for hypotheses never returned: the same output)
        over = (t + 1 >= limits) | cannot_win(new_logp.max(-1).values, new_fin_score[:, 0], a_lp_max)
        n_over = int(over.sum())
        if n_over == A:
            break
        parents = beam.gather(1, keep) % rows  # (A, K): each kept hypothesis's row within its sentence
        if n_over == 0:  # no index op while all go on; base (A, 1): each sentence's first row
            if base_of != (A, rows):
                base, base_of = torch.arange(A, device=device)[:, None] * rows, (A, rows)
            stepper.reorder((base + parents).view(-1))
            continue
        going = (~over).nonzero().squeeze(1)
        stepper.reorder((going[:, None] * rows + parents[going]).view(-1))  # finished sentences leave the stepper
        act = going if act is None else act[going]
    found = fin_score[:, 0] > ninf  # else nothing finished: the best alive, at its maximum length
    out = torch.where(found[:, None], fin[:, 0, 1:t + 2], alive[:, 0, 1:t + 2])
    return out, torch.where(found, fin_score[:, 0], alive_logp[:, 0] / lp_max)


def greedy_decode(model, src: Tensor, bos_id: int, eos_id: int, pad_id: int,
                  max_len_offset: int = 50, use_cache: bool = True,
                  weights: InferenceWeights | None = None) -> Tensor:
    """Greedy decoding of a batch src (B, S) -> (B, L) (no BOS; pad after EOS). `weights`: see `make_stepper`."""
    stepper = make_stepper(model, src, pad_id, 1, use_cache, weights)
    try:
        return greedy_search(stepper, src.size(0), bos_id, eos_id, pad_id,
                             _limits(model, src, pad_id, max_len_offset))
    finally:
        close_stepper(stepper)


def check_beam(beam: int, tgt_size: int, field: str = "--beam") -> None:
    """ConfigError naming `field` when the beam is wider than the target vocabulary: the beams past it hold
    nothing (every candidate is a token) and each one still costs a decoder pass."""
    from transformer_min.core.errors import ConfigError

    if beam > tgt_size:
        raise ConfigError(tr("{field} {beam}: wider than the checkpoint's {tgt_size} target symbols, so most beams would hold nothing; fix: use a beam of at most {tgt_size} (the paper's is 4)").format(field=field, beam=beam, tgt_size=tgt_size))


def beam_search(model, src: Tensor, bos_id: int, eos_id: int, pad_id: int, beam_size: int = 4,
                alpha: float = 0.6, max_len_offset: int = 50, use_cache: bool = True,
                search: str = "t2t", weights: InferenceWeights | None = None) -> Tensor:
    """Beam search (section 6.1 defaults) of a batch src (B, S) -> best hypotheses (B, L).

    Beam 1 is greedy decoding, as in tensor2tensor (whose beam search with K = 1 would still keep the
    best hypothesis that ended off the greedy path)."""
    if beam_size == 1:
        return greedy_decode(model, src, bos_id, eos_id, pad_id, max_len_offset, use_cache, weights)
    one_row = search == "t2t"  # the first step needs one row per sentence: the beams are one BOS
    stepper = make_stepper(model, src, pad_id, 1 if one_row else beam_size, use_cache, weights)
    try:
        out, _ = beam_search_steps(stepper, src.size(0), bos_id, eos_id, pad_id,
                                   _limits(model, src, pad_id, max_len_offset), beam_size, alpha, search, one_row)
    finally:
        close_stepper(stepper)
    return out


def make_stepper(model, src: Tensor, pad_id: int, repeat: int, use_cache: bool,
                 weights: InferenceWeights | None = None) -> Stepper:
    """The lean incremental step for a model in eval mode (decoding/lean.py) with `weights`
    (`inference_weights(model)` made once by a caller that decodes many batches; None: made from the model's
    current weights for this batch); the module path in training mode, or without the cache."""
    if use_cache and not model.training:
        return LeanStepper(model, src, pad_id, repeat, weights)
    return TransformerStepper(model, src, pad_id, repeat=repeat, use_cache=use_cache)


def close_stepper(stepper: Stepper) -> None:
    """Let a stepper that holds pooled buffers give them back (`LeanStepper.close`); others hold none."""
    close = getattr(stepper, "close", None)
    if close is not None:
        close()


def inference_weights(model, precision: str = "fp32") -> InferenceWeights | None:
    """The step weights of `model` as it is now, for the batches of one decoding (None in training mode: the
    module path decodes), their products in `precision` (fp32, bf16 or int8: decode.precision resolved). Make
    them again after the weights change (an optimizer step, a load)."""
    return None if model.training else model.inference_weights(precision=precision)


def _limits(model, src: Tensor, pad_id: int, offset: int) -> Tensor:
    limit = max_output_lengths(src, pad_id, offset)
    max_len = getattr(model.tgt_pos, "max_len", None)
    return limit.clamp(max=max_len - 1) if max_len else limit


def strip(tokens: Tensor, eos_id: int, pad_id: int) -> list[list[int]]:
    """Token rows -> lists cut before the first EOS (pads dropped)."""
    out = []
    for row in tokens.tolist():
        seq = []
        for tok in row:
            if tok == eos_id:
                break
            if tok != pad_id:
                seq.append(tok)
        out.append(seq)
    return out


@torch.no_grad()
def cross_attention_heads(model, src: Tensor, output: list[int], bos_id: int, eos_id: int) -> Tensor:
    """Encoder-decoder attention (section 3.2.3) of the last decoder layer for one sentence, per head.

    src (1, S), output tokens (no BOS) -> (H, T, S) where row i is the attention while predicting
    output token i (EOS is appended as the final row).
    """
    tgt = torch.tensor([[bos_id, *output]], device=src.device)
    _, att = model(src, tgt, return_attention=True)
    return att.cross[-1][0]  # (H, T, S)

