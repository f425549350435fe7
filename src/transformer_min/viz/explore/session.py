"""What `tmin explore` shows: a model (a checkpoint's, or random weights with a banner), its vocabulary,
example sentences and the run folder its metrics come from. Requests are served one at a time per model."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_min.core.config import AttentionDemoConfig, Config, VocabConfig
from transformer_min.core.errors import CheckpointError, TminError
from transformer_min.translation import synthetic as tasks
from transformer_min.viz.explore.tensors import ExploreInputError
from transformer_min.core.i18n import tr

MAX_SOURCE_TOKENS = 100  # a longer sentence is refused: the page draws every layer and head of it


class Vocabulary:
    """Token ids <-> what the page shows: a translation run's sentencepiece model, or the synthetic tasks'
    symbols (copy, reverse and random weights: a sentence is space-separated ids, e.g. "3 5 7")."""

    def __init__(self, v: VocabConfig, tokenizer=None, track: str = "tok", lang: str = "de"):
        self.v, self.tokenizer, self.track, self.lang = v, tokenizer, track, lang

    @property
    def kind(self) -> str:
        return "ids" if self.tokenizer is None else "text"

    def label(self, i: int) -> str:
        special = {self.v.pad_id: "<pad>", self.v.bos_id: "<s>", self.v.eos_id: "</s>"}
        if i in special:
            return special[i]
        return str(i) if self.tokenizer is None else self.tokenizer.sp.id_to_piece(i)

    def encode(self, text: str, normalized: bool = False) -> list[int]:
        """A sentence -> source ids (no EOS); an ExploreInputError naming what cannot be read."""
        if not text.strip():
            raise ExploreInputError(tr("sentence: empty; type a sentence (or pick an example)"))
        ids = self._ids(text) if self.tokenizer is None else self._pieces(text, normalized)
        if ids and ids[-1] == self.v.eos_id and self.tokenizer is None:
            ids = ids[:-1]
        if not ids:
            raise ExploreInputError(tr("sentence: no tokens left to translate; type a sentence"))
        return ids

    def _ids(self, text: str) -> list[int]:
        symbols = f"{tasks.FIRST_SYMBOL}..{self.v.src_size - 1}"
        ids = []
        for word in text.replace(",", " ").split():
            if not word.lstrip("-").isdigit():
                raise ExploreInputError(tr('sentence: {word!r} is not a token id; this model reads space-separated symbol ids {symbols}, e.g. "3 5 7 9"').format(word=word, symbols=symbols))
            i = int(word)
            if not 0 <= i < self.v.src_size or i in (self.v.pad_id, self.v.bos_id):
                raise ExploreInputError(tr("sentence: token {i} is unknown to this model; use the symbol ids {symbols}").format(i=i, symbols=symbols))
            ids.append(i)
        return ids

    def _pieces(self, text: str, normalized: bool) -> list[int]:
        from transformer_min.translation.moses import normalize_input

        line = text.strip() if normalized else normalize_input(text, self.track, self.lang)
        ids = self.tokenizer.encode([line])[0]
        unk = self.tokenizer.sp.unk_id()
        if unk in ids:
            pieces = self.tokenizer.pieces(line)
            bad = sorted({p for p, i in zip(pieces, ids) if i == unk})
            raise ExploreInputError(tr("sentence: unknown tokens {items} (not in the model's vocabulary, they would be <unk>); fix: leave them out or rephrase").format(items=', '.join(map(repr, bad))))
        return ids


@dataclass
class Session:
    """The model on show and everything the page needs beside it."""

    model: torch.nn.Module
    cfg: Config  # the model's config (the checkpoint's; with random weights the given one)
    demo: AttentionDemoConfig  # [attention] of the config given to tmin explore
    vocab: Vocabulary
    checkpoint: str | None = None
    run_dir: Path | None = None
    examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def random(self) -> bool:
        return self.checkpoint is None

    def info(self) -> dict:
        m = self.cfg.model
        return {"random": self.random, "checkpoint": self.checkpoint, "task": self.cfg.train.task,
                "vocab": self.vocab.kind, "num_layers": m.num_layers, "num_heads": m.num_heads,
                "d_model": m.d_model, "max_tokens": max_source_tokens(self.cfg), "examples": self.examples,
                "demo": {"d_model": self.demo.d_model, "num_heads": self.demo.num_heads,
                         "seq_len": self.demo.seq_len, "seed": self.demo.seed}}


def max_source_tokens(cfg: Config) -> int:
    """Source tokens a sentence may have: EOS must fit in model.max_len, and at most MAX_SOURCE_TOKENS."""
    return min(cfg.model.max_len - 1, MAX_SOURCE_TOKENS)


def run_dir_of(path: Path) -> Path | None:
    """The run folder of a checkpoint (a run directory itself, or runs/<name>/checkpoints/<file>)."""
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else None


def open_session(cfg: Config, checkpoint: str | None = None) -> Session:
    """The checkpoint's model (eval mode), or with no checkpoint a model of cfg's [model] sizes with random
    weights (seeded by [attention] seed) on the synthetic tasks' vocabulary."""
    from transformer_min.model.transformer import build_model
    from transformer_min.model.saved import load_model
    from transformer_min.translation.synthetic import synthetic_config

    if checkpoint is None:
        model_cfg = synthetic_config(cfg)
        torch.manual_seed(cfg.attention.seed)
        model = build_model(model_cfg).eval()
        return Session(model, model_cfg, cfg.attention, Vocabulary(model_cfg.vocab),
                       examples=["3 4 5 6 7 8", "9 8 7 3", "3 5 7 9 10 4 6"])
    path = Path(checkpoint)
    if not path.exists():
        raise CheckpointError(tr("--checkpoint {checkpoint}: no such file or run directory; fix: give a run folder of tmin train (runs/<name>) or one of its checkpoint files").format(checkpoint=checkpoint))
    model, model_cfg = load_model(path)
    run_dir = run_dir_of(path)
    vocab, examples = _vocabulary(model_cfg, run_dir, checkpoint)
    return Session(model, model_cfg, cfg.attention, vocab, checkpoint, run_dir, examples)


def _vocabulary(cfg: Config, run_dir: Path | None, checkpoint: str) -> tuple[Vocabulary, list[str]]:
    """The run's vocabulary and up to 8 example sources (val, then test, when the data is there)."""
    if cfg.train.task in tasks.TASKS:
        pairs = tasks.eval_set(cfg.train.task, 6, cfg.train.seed)
        return Vocabulary(cfg.vocab), [" ".join(map(str, s)) for s, _ in pairs]
    from transformer_min.data import text
    from transformer_min.data.tokenizer import Tokenizer

    spm = None if run_dir is None else run_dir / "spm.model"
    if spm is None or not spm.is_file():
        raise CheckpointError(tr("--checkpoint {checkpoint}: a translation model needs its run's vocabulary (spm.model in the run folder) and none was found; fix: pass the run folder (runs/<name>) or a file in its checkpoints/ folder").format(checkpoint=checkpoint))
    d = cfg.data
    examples: list[str] = []
    for split in (d.valid_split, d.test_split):
        try:
            examples += [s for s in text.read_lines(text.split_path(d, split, d.src_lang)) if s.strip()][:4]
        except TminError:  # the run's data is not here: the page takes typed sentences only
            continue
    return Vocabulary(cfg.vocab, Tokenizer(spm), d.track, d.src_lang), examples
