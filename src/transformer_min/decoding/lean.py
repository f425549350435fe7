"""The decoder step for inference, without what only training needs (section 6.1's searches, issues 18, 23).

`LeanStepper` computes what `TransformerStepper(use_cache=True)` computes, one new token per row and step,
with less work around the arithmetic. The step itself is the model's (`Transformer.decode_step`, each
`DecoderLayer.step` beside its `forward`); this module only keeps the search's state:
- the weights the step uses (`Transformer.inference_weights()`: Q/K/V fused, stored in the layout measured
  faster on this machine), given by the caller or made from the model's current weights here; never cached
  across steppers, so every decoding sees the weights the model holds when it starts;
- the encoder output (through the weights' own encoder where they carry one: int8's), and each layer's
  encoder-decoder keys and values, projected once before the first step;
- the self-attention keys and values in buffers of the weights' pool, given back at `close` (the searches call
  it when done), so the batches of one decoding reuse them (model/step_kv.py);
- rows can be dropped (`reorder` with fewer rows): the searches drop sentences that are finished, so no
  GEMM is spent on them. The sentences that go on keep their place in the caches (their keys and values are not
  copied); only those past the new end move into the holes (`fill_holes`), so the caches' rows are the search's in
  another order (`rows`), which the step takes its tokens in and gives its log-probabilities back from. The
  encoder side (each sentence's cross K, V) moves the same way, in place.
Tests hold it to the module path: the same log-probabilities and the same hypotheses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.model.inference import InferenceWeights
from transformer_min.model.masks import padding_mask
from transformer_min.model.step_kv import release_self_attention, reorder_self_attention, to_places


class LeanStepper:
    """Runs a `Transformer` (eval mode) one token per row and step, for greedy and beam search.

    The encoder-decoder keys and values are kept once per sentence: while the rows come in equal groups of
    consecutive rows of one sentence (its beams, as the searches keep them), each group's queries attend to its
    sentence's one copy (`MultiHeadAttention.cross_step`); after any other `reorder`, each row gets its copy."""

    fresh_output = True  # `step` returns a new tensor each call, which the search may overwrite

    def __init__(self, model, src: Tensor, pad_id: int, repeat: int = 1, weights: InferenceWeights | None = None):
        """`weights`: `model.inference_weights()` made by the caller for several batches; None: made here."""
        if model.training:
            raise ValueError("LeanStepper is for inference: call model.eval() first")
        self.model = model
        self.weights = model.inference_weights() if weights is None else weights
        src_mask = padding_mask(src, pad_id)  # (B, 1, 1, S)
        with torch.no_grad():
            memory, _ = model.encode(src, src_mask, encoder=self.weights.encoder)  # (B, S, D)
            # per layer: self-attention cache (buffers of the weights' pool), cross K, V (B, H, S, d)
            self.caches = model.start_steps(memory, self.weights.buffers)
        # added to the encoder-decoder scores: 0 where a row may attend, the dtype's lowest value at padding; None
        # where no sentence has padding (always at batch 1): adding zeros changes no score
        lowest = torch.finfo(memory.dtype).min
        self.mask_all = None if bool(src_mask.all()) else torch.zeros(
            src_mask.shape, dtype=memory.dtype, device=src.device).masked_fill_(~src_mask, lowest)  # (B, 1, 1, S)
        self.sentence = torch.arange(src.size(0), device=src.device).repeat_interleave(repeat)  # of each row
        self.batch = src.size(0)
        self.held = torch.arange(src.size(0), device=src.device)  # the sentence of each of the caches' cross K, V
        self.group: int | None = repeat  # rows per sentence while they come in equal consecutive groups, else None
        self.src_mask = self.mask_all
        self.rows: Tensor | None = None  # the caches' row of each of the search's rows; None: the same

    @torch.no_grad()
    def step(self, prefix: Tensor) -> Tensor:
        """prefix (N, t + 1) -> log-probabilities of token t + 2 (N, V); only the newest token is fed."""
        logits = self.model.decode_step(prefix[:, -1], prefix.size(1) - 1, self.caches, self.weights,
                                        self.src_mask, self.rows).float()  # (N, V)
        if self.weights.generator is None:  # a generator of the caller's: its output is left as it is
            return torch.log_softmax(logits, dim=-1)
        # the step's generator product returns a new tensor each call: normalised in place, the same values without
        # a second (N, V) buffer (at 128 rows x 8,000 a fresh one cost more than the log-softmax itself; issue 37)
        return torch.log_softmax(logits, dim=-1, out=logits)

    def close(self) -> None:
        """The search is done: the self-attention buffer goes back to the weights' pool for the next batch."""
        release_self_attention(self.caches)

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` of the state: beams reordered within their sentence and, when `index` is shorter
        than the rows held, the rows of finished sentences dropped (their encoder side goes too)."""
        if self.held.numel() == 1 and index.numel() == self.sentence.numel():
            # every row is of the one sentence held (batch 1): its beams only move among themselves
            reorder_self_attention(self.caches, index, index.numel())
            return
        sentence = self.sentence.index_select(0, index)
        if sentence.numel() == self.sentence.numel() and torch.equal(sentence, self.sentence):
            reorder_self_attention(self.caches, self._in_caches(index), self.group)
            return  # the beams moved within their sentences: the encoder side stays as it is
        self.sentence = sentence
        held, counts = torch.unique_consecutive(self.sentence, return_counts=True)
        group = int(counts[0]) if held.numel() and bool((counts == counts[0]).all()) else None
        if group is not None and group == self.group:
            self._drop(index, held, group)
            return
        # any other reorder (the first step's one row per sentence widened to the beams): in the search's order
        reorder_self_attention(self.caches, self._parents(index), group)
        self.group, self.rows = group, None
        if held.numel() and group is None:  # not in equal groups: a copy per row
            held = self.sentence
        if held.numel() == self.held.numel() and torch.equal(held, self.held):
            return
        self._select_cross(held)

    def _parents(self, index: Tensor) -> Tensor:
        """The caches' row of the parent of each new row (index: the search's rows)."""
        return index if self.rows is None else self.rows.index_select(0, index)

    def _in_caches(self, index: Tensor) -> Tensor:
        """A reorder within sentences in the caches' terms: each of the caches' rows takes its parent's."""
        return index if self.rows is None else to_places(self._parents(index), self.rows)

    def _drop(self, index: Tensor, held: Tensor, group: int) -> None:
        """Finished sentences leave (`held`: the sentences that go on, each with `group` rows): the others keep their
        blocks in the caches, and those past the new end move into the holes."""
        A, device = held.numel(), index.device
        first = torch.div(index[::group], group, rounding_mode="floor")  # (A,) each sentence's place in the search
        old = first if self.rows is None else torch.div(  # (A,) its block in the caches
            self.rows.index_select(0, first * group), group, rounding_mode="floor")
        places = fill_holes(old.tolist(), A)
        place = torch.tensor(places, dtype=torch.long, device=device)
        parents = self._parents(index)
        if places == list(range(A)):
            self.rows = None
        else:
            self.rows = (place[:, None] * group + torch.arange(group, device=device)).view(-1)  # (A group,)
            parents = to_places(parents, self.rows)
        reorder_self_attention(self.caches, parents, group)
        source = to_places(old, place)  # (A,) the block each block of the caches was
        self.held = to_places(held, place)  # (A,) the sentence in each block
        moved = (source != torch.arange(A, device=device)).nonzero().squeeze(1)  # none where the last ones ended
        for cache in self.caches:
            for kv in (cache.cross_k, cache.cross_v) if moved.numel() else ():  # (B, H, S, d): past A into the holes
                kv.index_copy_(0, moved, kv.index_select(0, source.index_select(0, moved)))
            cache.cross_k, cache.cross_v = cache.cross_k[:A], cache.cross_v[:A]
        self.src_mask = None if self.mask_all is None else self.mask_all.index_select(0, self.held)

    def _select_cross(self, held: Tensor) -> None:
        """The encoder side of sentences `held` (one per block of the caches, or per row), taken from where the
        caches' cross K, V hold them now (each sentence that goes on is still held)."""
        where = torch.zeros(self.batch, dtype=torch.long, device=held.device)
        where[self.held] = torch.arange(self.held.numel(), device=held.device)  # a place of each sentence held
        pos = where.index_select(0, held)
        for cache in self.caches:
            cache.cross_k, cache.cross_v = cache.cross_k.index_select(0, pos), cache.cross_v.index_select(0, pos)
        self.held = held
        self.src_mask = None if self.mask_all is None else self.mask_all.index_select(0, held)


def fill_holes(blocks: list[int], n: int) -> list[int]:
    """Where each of n kept blocks goes: `blocks` (their places, distinct) -> places 0..n-1, each block below n
    staying where it is and those past it taking the free places in order. fill_holes([0, 2, 5], 3) == [0, 2, 1]."""
    taken = {b for b in blocks if b < n}
    free = iter(b for b in range(n) if b not in taken)
    return [b if b < n else next(free) for b in blocks]
