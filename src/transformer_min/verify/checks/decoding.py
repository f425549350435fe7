"""Stage `decoding`: section 6.1, beam 4, length penalty alpha = 0.6, maximum length input + 50.

`transformer_min.decoding.search` is imported inside the checks: if it is missing, each check is a FAIL
row naming the ImportError.
"""

from __future__ import annotations

import contextlib
import inspect
import math

import torch
from torch import nn

from transformer_min.core.config import DecodeConfig
from transformer_min.verify.fixtures import tiny_model
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, fmt, register

STAGES = (Stage("decoding", "Decoding", "6.1"),)

PAD, BOS, EOS, A = 0, 1, 2, 3


@register("decoding.defaults", "decoding", "6.1",
          "beam size 4, length penalty alpha = 0.6, maximum output length = input length + 50 "
          "(config defaults and the defaults of beam_search)", "EXACT",
          "transformer_min.core.config.DecodeConfig")
def defaults(ctx: Context) -> Result:
    from transformer_min.decoding import search as decoding

    d = DecodeConfig()
    sig = inspect.signature(decoding.beam_search).parameters
    got = (d.beam_size, d.length_penalty, d.max_len_offset,
           sig["beam_size"].default, sig["alpha"].default, sig["max_len_offset"].default)
    return Result(got == (4, 0.6, 50, 4, 0.6, 50),
                  "config: beam %s, alpha %s, +%s; beam_search: beam %s, alpha %s, +%s" % got,
                  tr("beam 4, alpha 0.6, +50 in both"))


@register("decoding.length_penalty_gnmt", "decoding", "6.1",
          "the length penalty is GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha", "EXACT",
          "transformer_min.decoding.search.length_penalty")
def length_penalty(ctx: Context) -> Result:
    from transformer_min.decoding import search as decoding

    worst = max(abs(float(decoding.length_penalty(n, 0.6)) - ((5 + n) / 6) ** 0.6) for n in range(1, 101))
    lp10 = float(decoding.length_penalty(10, 0.6))
    ok = worst < 1e-12 and abs(lp10 - 10 ** 0.6) > 1
    return Result(ok, tr("max |lp - ((5 + n)/6)^0.6| {worst} for n = 1..100; lp(10) = {lp10:.6f}").format(worst=fmt(worst), lp10=lp10),
                  tr("< 1e-12; lp(10) = {value:.6f} (|Y|^0.6 would be {value2:.4f})").format(value=(15 / 6) ** 0.6, value2=10 ** 0.6))


class _ScriptedStepper:
    """A fake decoder over {pad, bos, eos, a}: after BOS p(eos) = p(a) = 0.5; after a p(eos) = 0.95."""

    def step(self, prefix: torch.Tensor) -> torch.Tensor:
        last = prefix[:, -1]
        out = torch.full((prefix.shape[0], 4), float("-inf"))
        first = last == BOS
        out[first, EOS], out[first, A] = math.log(0.5), math.log(0.5)
        out[~first, EOS], out[~first, A] = math.log(0.95), math.log(0.05)
        return out

    def reorder(self, index: torch.Tensor) -> None:
        pass


@register("decoding.beam_score_normalised", "decoding", "6.1",
          "beam search ranks hypotheses by log P / lp(|Y|): with alpha = 0.6 a longer hypothesis wins "
          "that the raw log P would reject", "EXACT",
          "transformer_min.decoding.search.beam_search_steps")
def beam_score(ctx: Context) -> Result:
    from transformer_min.decoding import search as decoding

    limits = torch.tensor([5])
    out06, score06 = decoding.beam_search_steps(_ScriptedStepper(), 1, BOS, EOS, PAD, limits, beam_size=2, alpha=0.6)
    out0, score0 = decoding.beam_search_steps(_ScriptedStepper(), 1, BOS, EOS, PAD, limits, beam_size=2, alpha=0.0)
    # by hand: [eos]: log 0.5 / lp(1) = -0.6931; [a, eos]: (log 0.5 + log 0.95) / ((5 + 2) / 6)^0.6
    long_score = (math.log(0.5) + math.log(0.95)) / (7 / 6) ** 0.6
    best06 = [t for t in out06[0].tolist() if t != PAD]
    best0 = [t for t in out0[0].tolist() if t != PAD]
    ok = best06 == [A, EOS] and abs(float(score06[0]) - long_score) < 1e-5 and best0 == [EOS]
    lines = [tr("{hyp}: log P = {logp}, lp = {lp}, score {score}").format(
                 hyp="[eos]", logp=f"{math.log(0.5):.4f}", lp="1", score=f"{math.log(0.5):.4f}"),
             tr("{hyp}: log P = {logp}, lp = {lp}, score {score}").format(
                 hyp="[a, eos]", logp=f"{math.log(0.5) + math.log(0.95):.4f}", lp=f"{(7 / 6) ** 0.6:.4f}",
                 score=f"{long_score:.4f}")]
    return Result(ok, tr("alpha 0.6: {best06} score {score06:.4f}; alpha 0: {best0} score {score0:.4f}").format(best06=best06, score06=float(score06[0]), best0=best0, score0=float(score0[0])),
                  tr("alpha 0.6: [{A}, {EOS}] score {long_score:.4f}; alpha 0: [{EOS}]").format(A=A, EOS=EOS, long_score=long_score), lines)


@contextlib.contextmanager
def _one_thread():
    """Decoding a tiny model is ~100 sequential steps of tiny ops: on a busy machine OpenMP threads
    wait on each other at every op (seconds instead of milliseconds), so run them on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Forbid(nn.Module):
    """Wraps the pre-softmax layer so that one token can never win (a model that never stops)."""

    def __init__(self, inner: nn.Module, token: int, boost: bool = False):
        super().__init__()
        self.inner, self.token, self.boost = inner, token, boost

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.inner(h).clone()
        logits[..., self.token] = 1e4 if self.boost else -1e4
        return logits


@register("decoding.max_length_input_plus_50", "decoding", "6.1",
          "output length is at most input length + 50 (greedy and beam); decoding stops early at EOS", "EXACT",
          "transformer_min.decoding.search.max_output_lengths")
def max_length(ctx: Context) -> Result:
    from transformer_min.decoding import search as decoding

    model = tiny_model()
    model.generator = _Forbid(model.generator, EOS)  # never emits EOS: runs to the limit
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 9, PAD, PAD]])  # 7 and 5 real tokens
    with _one_thread():
        greedy = decoding.greedy_decode(model, src, BOS, EOS, PAD)
        beam = decoding.beam_search(model, src, BOS, EOS, PAD)
        model.generator = _Forbid(model.generator.inner, EOS, boost=True)  # always EOS: stops at once
        early = decoding.greedy_decode(model, src, BOS, EOS, PAD)
    lengths = [int((row != PAD).sum()) for row in greedy] + [int((row != PAD).sum()) for row in beam]
    early_len = early.shape[1]
    ok = lengths == [57, 55, 57, 55] and early_len == 1
    return Result(ok, tr("greedy {lengths}, beam {lengths2} tokens for inputs of 7 and 5; {early_len} step(s) when EOS comes first").format(lengths=lengths[:2], lengths2=lengths[2:], early_len=early_len),
                  tr("greedy [57, 55], beam [57, 55]; 1 step"))
