"""The decoder run one step at a time for the searches of section 6.1 (decoding/search.py).

A `Stepper` turns a prefix into the log-probabilities of the next token and keeps whatever state it needs
between steps; `TransformerStepper` is the real model with or without the key/value cache
(model/kv_cache.py), a scripted fake in the tests is another.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from transformer_min.model.masks import causal_mask, padding_mask


class Stepper(Protocol):
    def step(self, prefix: Tensor) -> Tensor:
        """prefix (N, t) token ids (BOS first) -> log-probabilities of token t+1, (N, V)."""

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` of the decoder state: beams reordered (beam search) and, where `index` has fewer
        rows than the state, the rows of finished sentences dropped."""


class TransformerStepper:
    """Runs a `Transformer` one step at a time.

    use_cache=True: the decoder self-attention keys/values are cached and only the newest token is
    fed; encoder-decoder keys/values are projected once. use_cache=False re-runs the decoder on the
    whole prefix every step (the reference the cache is tested against).
    """

    def __init__(self, model, src: Tensor, pad_id: int, repeat: int = 1, use_cache: bool = True):
        self.model = model
        self.use_cache = use_cache
        src_mask = padding_mask(src, pad_id)  # (B, 1, 1, S)
        memory, _ = model.encode(src, src_mask)  # (B, S, D)
        if repeat > 1:  # beams of one sentence share its encoding
            memory = memory.repeat_interleave(repeat, 0)
            src_mask = src_mask.repeat_interleave(repeat, 0)
        self.memory, self.src_mask = memory, src_mask
        self.cache = model.new_cache() if use_cache else None

    def step(self, prefix: Tensor) -> Tensor:
        t = prefix.size(1)
        if self.use_cache:
            hidden, _, _ = self.model.decode(prefix[:, -1:], self.memory, self.src_mask, None,
                                             cache=self.cache, offset=t - 1)  # (N, 1, D)
        else:
            hidden, _, _ = self.model.decode(prefix, self.memory, self.src_mask,
                                             causal_mask(t, prefix.device))  # (N, t, D)
        logits = self.model.generator(hidden[:, -1])  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1)

    def reorder(self, index: Tensor) -> None:
        # Rows move within a sentence's beam group, whose memory and cross-attention keys are identical, so
        # only the self-attention cache needs reordering; when rows are dropped (finished sentences, `index`
        # shorter than the rows held), the encoder side is cut to the same rows.
        shrink = index.numel() != self.memory.size(0)
        if shrink:
            self.memory, self.src_mask = self.memory.index_select(0, index), self.src_mask.index_select(0, index)
        if self.cache is not None:
            for layer in self.cache:
                (layer.reorder if shrink else layer.self_kv.reorder)(index)
