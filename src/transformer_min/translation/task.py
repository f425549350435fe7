"""train.task = "translation" as the trainer takes it (the training.task.Task protocol).

The data side (the prepared Multi30k cache, the SentencePiece model, the token batches) is
`data.pipeline.translation_setup`; the validation loss + BLEU evaluator is `translation.evaluate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_min.core.config import Config
from transformer_min.core.distributed import DistInfo
from transformer_min.data.batch import BatchSource
from transformer_min.training.task import Evaluator


@dataclass
class TranslationTask:
    """Section 5.1's setting: sentence pairs batched by length, one shared vocabulary (section 3.4)."""

    source: BatchSource
    evaluate: Evaluator
    src_vocab_size: int
    tgt_vocab_size: int


def translation_task(cfg: Config, dist: DistInfo, device: torch.device, run_dir: Path) -> TranslationTask:
    """Prepare (or reuse) the data cache, copy spm.model into run_dir (rank 0), and build this rank's batches."""
    from transformer_min.data.pipeline import translation_setup
    from transformer_min.translation.evaluate import TranslationEvaluator

    source, prepared = translation_setup(cfg, run_dir, dist, device)
    n = len(prepared.tokenizer)  # shared source/target vocabulary
    return TranslationTask(source, TranslationEvaluator(cfg, prepared, device), n, n)
