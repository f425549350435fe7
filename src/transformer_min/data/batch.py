"""A training batch and the protocol every batch source follows (synthetic tasks, parallel text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


@dataclass
class Batch:
    """src (B, S); tgt_in = BOS + y (B, T) (the output shifted right); tgt_out = y + EOS (B, T)."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))

    def num_tokens(self, pad_id: int) -> int:
        return int((self.tgt_out != pad_id).sum())


class BatchSource(Protocol):
    """An endless, seeded, resumable stream of batches (one shard per rank under DDP)."""

    def next_batch(self) -> Batch: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def pad_sequences(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad token lists into (B, L_max)."""
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def make_batch(pairs: list[tuple[list[int], list[int]]], bos_id: int, eos_id: int, pad_id: int) -> Batch:
    """(source ids, target ids) pairs -> Batch with EOS on the source and BOS/EOS on the target."""
    src = pad_sequences([s + [eos_id] for s, _ in pairs], pad_id)
    tgt_in = pad_sequences([[bos_id] + t for _, t in pairs], pad_id)
    tgt_out = pad_sequences([t + [eos_id] for _, t in pairs], pad_id)
    return Batch(src, tgt_in, tgt_out)
