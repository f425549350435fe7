"""The decoder step for inference, without what only training needs (section 6.1's searches, issues 18, 23).

`LeanStepper` computes what `TransformerStepper(use_cache=True)` computes, one new token per row and step,
with less work around the arithmetic. The step itself is the model's (`Transformer.decode_step`, each
`DecoderLayer.step` beside its `forward`); this module only keeps the search's state:
- the weights the step uses (`Transformer.inference_weights()`: Q/K/V fused, stored in the layout measured
  faster on this machine), given by the caller or made from the model's current weights here; never cached
  across steppers, so every decoding sees the weights the model holds when it starts;
- the encoder output, and each layer's encoder-decoder keys and values, projected once before the first step;
- rows can be dropped (`reorder` with fewer rows): the searches drop sentences that are finished, so no
  GEMM is spent on them.
Tests hold it to the module path: the same log-probabilities and the same hypotheses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_min.model.inference import InferenceWeights
from transformer_min.model.masks import padding_mask


class LeanStepper:
    """Runs a `Transformer` (eval mode) one token per row and step, for greedy and beam search."""

    def __init__(self, model, src: Tensor, pad_id: int, repeat: int = 1, weights: InferenceWeights | None = None):
        """`weights`: `model.inference_weights()` made by the caller for several batches; None: made here."""
        if model.training:
            raise ValueError("LeanStepper is for inference: call model.eval() first")
        self.model = model
        self.weights = model.inference_weights() if weights is None else weights
        src_mask = padding_mask(src, pad_id)  # (B, 1, 1, S)
        with torch.no_grad():
            memory, _ = model.encode(src, src_mask)  # (B, S, D)
            if repeat > 1:  # beams of one sentence share its encoding
                memory = memory.repeat_interleave(repeat, 0)
                src_mask = src_mask.repeat_interleave(repeat, 0)
            self.caches = model.start_steps(memory)  # per layer: self-attention cache, cross K, V
        self.src_mask = src_mask  # (N, 1, 1, S)

    @torch.no_grad()
    def step(self, prefix: Tensor) -> Tensor:
        """prefix (N, t + 1) -> log-probabilities of token t + 2 (N, V); only the newest token is fed."""
        logits = self.model.decode_step(prefix[:, -1], prefix.size(1) - 1, self.caches, self.weights,
                                        self.src_mask)  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1)

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` of the state: beams reordered within their sentence and, when `index` is shorter
        than the rows held, the rows of finished sentences dropped (their encoder side goes too)."""
        shrink = index.numel() != self.src_mask.size(0)
        if shrink:
            self.src_mask = self.src_mask.index_select(0, index)
        for cache in self.caches:
            cache.reorder(index, shrink)
