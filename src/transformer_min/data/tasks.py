"""Synthetic tasks that need no data (copy, reverse), generated on the fly from a seed.

Vocabulary of 11: PAD 0, BOS 1, EOS 2, symbols 3..10; lengths 1-10. Reverse needs attention to the
mirrored position, not just the diagonal, so it catches a model that only learned to copy.
"""

from __future__ import annotations

import torch

from transformer_min.data.batch import Batch, make_batch

VOCAB_SIZE = 11
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FIRST_SYMBOL = 3
MIN_LEN, MAX_LEN = 1, 10
TASKS = ("copy", "reverse")


def target_for(task: str, seq: list[int]) -> list[int]:
    if task == "copy":
        return list(seq)
    if task == "reverse":
        return list(reversed(seq))
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def sample_sequences(n: int, generator: torch.Generator) -> list[list[int]]:
    """n random symbol sequences with uniform lengths in [MIN_LEN, MAX_LEN]."""
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=generator).tolist()
    return [torch.randint(FIRST_SYMBOL, VOCAB_SIZE, (k,), generator=generator).tolist() for k in lengths]


class SyntheticTask:
    """An endless stream of batches of about `batch_tokens` target tokens for `task`.

    Rank r of a world of size w draws from its own generator, seeded (seed, r): shards differ and
    are reproducible. The generator state is part of the checkpoint, so resume continues exactly.
    """

    def __init__(self, task: str, batch_tokens: int, seed: int, rank: int = 0):
        target_for(task, [])  # validates the name
        self.task = task
        avg_target = (MIN_LEN + MAX_LEN) / 2 + 1  # + EOS
        self.batch_size = max(1, int(batch_tokens / avg_target))
        self.rank = rank
        self.generator = torch.Generator().manual_seed(seed * 1000 + rank)

    def next_batch(self) -> Batch:
        seqs = sample_sequences(self.batch_size, self.generator)
        return make_batch([(s, target_for(self.task, s)) for s in seqs], BOS_ID, EOS_ID, PAD_ID)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """This rank's saved stream; with "reshard" (a resume at another world size, from rank 0's
        state) rank 0 continues that stream and every other rank draws a new one seeded from it and
        its rank, so the shards still differ."""
        self.generator.set_state(state["generator"])
        if state.get("reshard") and self.rank != 0:
            offset = int(torch.randint(0, 2**62, (1,), generator=self.generator))
            self.generator = torch.Generator().manual_seed(offset + self.rank)


def eval_set(task: str, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """n fresh (source, expected output) pairs from a seed disjoint from training."""
    g = torch.Generator().manual_seed(10_000_019 + seed)
    return [(s, target_for(task, s)) for s in sample_sequences(n, g)]
