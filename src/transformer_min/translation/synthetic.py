"""Synthetic tasks that need no data (copy, reverse), generated on the fly from a seed: the trainer's other
tasks, beside the translation task (`translation/task.py`), since both evaluate by decoding.

Vocabulary of 11: PAD 0, BOS 1, EOS 2 (core.special_tokens), symbols 3..10; lengths 1-10. Reverse needs
attention to the mirrored position, not just the diagonal, so it catches a model that only learned to copy.
`synthetic_task` gives the trainer what it needs (training.task.Task): batches, an evaluator, the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from transformer_min.core.config import Config, with_overrides
from transformer_min.core.distributed import DistInfo
from transformer_min.core.special_tokens import BOS_ID, EOS_ID, PAD_ID
from transformer_min.data.batch import Batch, make_batch, pad_sequences
from transformer_min.decoding.search import greedy_decode, inference_weights, strip

VOCAB_SIZE = 11
FIRST_SYMBOL = 3  # the first id after PAD, BOS, EOS
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


def synthetic_config(cfg: Config) -> Config:
    """The synthetic tasks define their own vocabulary (11 ids: PAD 0, BOS 1, EOS 2, symbols 3-10)."""
    return with_overrides(cfg, "vocab", src_size=VOCAB_SIZE, tgt_size=VOCAB_SIZE,
                          pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID)


def synthetic_accuracy(model: nn.Module, task: str, n: int, seed: int, device: torch.device | str,
                       batch_size: int = 250, max_len_offset: int = 50) -> float:
    """Fraction of n fresh sequences decoded exactly right by greedy search (section 6.1 without a beam)."""
    pairs = eval_set(task, n, seed)
    weights = inference_weights(model)  # the weights being evaluated, made once for this evaluation
    correct = 0
    for i in range(0, n, batch_size):
        chunk = pairs[i:i + batch_size]
        src = pad_sequences([s + [EOS_ID] for s, _ in chunk], PAD_ID).to(device)  # (B, S)
        out = greedy_decode(model, src, BOS_ID, EOS_ID, PAD_ID, max_len_offset, weights=weights)
        out = strip(out, EOS_ID, PAD_ID)
        correct += sum(o == want for o, (_, want) in zip(out, chunk))
    return correct / n


class SyntheticEvaluator:
    """Greedy decoding exact-match accuracy on fresh sequences (200 during training, 1000 at the end)."""

    def __init__(self, task: str, seed: int, device: torch.device | str, n_during: int = 200, n_final: int = 1000):
        self.task, self.seed, self.device = task, seed, device
        self.n_during, self.n_final = n_during, n_final

    def __call__(self, model: nn.Module, final: bool) -> dict:
        acc = synthetic_accuracy(model, self.task, self.n_final if final else self.n_during, self.seed, self.device)
        return {"accuracy": acc, "score": acc}


@dataclass
class SyntheticSetup:
    """The copy or reverse task as the trainer takes it (the training.task.Task protocol)."""

    source: SyntheticTask
    evaluate: Callable[[nn.Module, bool], dict]
    src_vocab_size: int = VOCAB_SIZE
    tgt_vocab_size: int = VOCAB_SIZE


def synthetic_task(cfg: Config, dist: DistInfo, device: torch.device, run_dir: Path) -> SyntheticSetup:
    """cfg.train.task ("copy" or "reverse"): this rank's batch stream and the accuracy evaluator."""
    t = cfg.train
    return SyntheticSetup(SyntheticTask(t.task, t.batch_tokens, t.seed, dist.rank),
                          SyntheticEvaluator(t.task, t.seed, device))
