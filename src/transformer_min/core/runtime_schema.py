"""The run sections of config.toml ([train], [data], [decode]) and settings.json's runtime part.

Frozen, validated dataclasses; every error names the key path (`train.lr_factor`) and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from transformer_min.core.schema import fail as _fail
from transformer_min.core.i18n import tr

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


MAX_SEED = 2**32 - 1
MAX_ACCUM_STEPS = 1024


@dataclass(frozen=True)
class TrainConfig:
    """Section 5: Adam(0.9, 0.98, 1e-9), eq. (3) schedule, label smoothing 0.1."""

    task: Literal["copy", "reverse", "translation"] = "copy"
    steps: int = 1000
    batch_tokens: int = 2048  # target tokens per batch (5.1 batches by token count)
    warmup_steps: int = 4000
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    clip: float = 0.0  # gradient-norm clipping; 0 = off (not in the paper)
    weight_decay: float = 0.0
    seed: int = 1234
    eval_interval: int = 200
    checkpoint_interval: int = 500
    keep_last: int = 5
    patience: int = 0  # evaluations without improvement before stopping; 0 = off
    time_budget_minutes: float = 0.0  # stop training after this wall time; 0 = off
    out_dir: str = "runs"
    name: str = ""  # run name; "" derives one from the task and time
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    accum_steps: int = 1
    compile: bool = False
    # fused: the generator (3.4) and the label-smoothed loss (5.4) in one pass over the real target tokens
    # (model/generator_loss.py), never forming the (B, T, V) logits; paper: generator(hidden) then
    # training.loss.label_smoothed_nll. The same loss and gradients to float rounding.
    loss_kernel: Literal["fused", "paper"] = "fused"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_tokens", "warmup_steps", "eval_interval", "checkpoint_interval",
                     "accum_steps", "keep_last"):
            if getattr(self, name) <= 0:
                raise _fail(f"train.{name}", tr("must be a positive integer, got {getattr}").format(getattr=getattr(self, name)))
        if self.lr_factor <= 0:
            raise _fail("train.lr_factor", tr("must be > 0, got {lr_factor}").format(lr_factor=self.lr_factor))
        if not 0.0 <= self.label_smoothing < 1.0:
            raise _fail("train.label_smoothing", tr("must lie in [0, 1), got {label_smoothing}").format(label_smoothing=self.label_smoothing))
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise _fail("train.betas", tr("must be two numbers in [0, 1), got {list}").format(list=list(self.betas)))
        if self.eps <= 0:
            raise _fail("train.eps", tr("must be > 0, got {eps}").format(eps=self.eps))
        for name in ("clip", "weight_decay", "time_budget_minutes", "patience"):
            if getattr(self, name) < 0:
                raise _fail(f"train.{name}", tr("must be >= 0, got {getattr}").format(getattr=getattr(self, name)))
        if self.accum_steps > MAX_ACCUM_STEPS:  # each of them is a whole batch of batch_tokens
            raise _fail("train.accum_steps", tr("{accum_steps:,} batches of {batch_tokens:,} tokens per step is more than {MAX_ACCUM_STEPS:,}; fix: use at most {MAX_ACCUM_STEPS:,} (the effective batch is accum_steps * batch_tokens; the paper's is 25,000 tokens)").format(accum_steps=self.accum_steps, batch_tokens=self.batch_tokens, MAX_ACCUM_STEPS=MAX_ACCUM_STEPS))
        if not str(self.out_dir).strip():  # "" would scatter runs over the current folder
            raise _fail("train.out_dir", tr('is empty; fix: name the folder that holds the runs, e.g. out_dir = "runs"'))
        if not 0 <= self.seed <= MAX_SEED:  # each rank seeds its stream with seed * 1000 + rank (int64)
            raise _fail("train.seed", tr("must lie in [0, {MAX_SEED}], got {seed}; fix: pick a seed in that range, e.g. 1234").format(MAX_SEED=MAX_SEED, seed=self.seed))


@dataclass(frozen=True)
class DataConfig:
    """Parallel text for translation (section 5.1). Paths are config values: users bring their data."""

    data_dir: str = "data/multi30k"
    src_lang: str = "de"
    tgt_lang: str = "en"
    track: Literal["tok", "raw"] = "tok"  # tok: lowercased-tokenized files (primary Multi30k track)
    train_split: str = "train"
    valid_split: str = "val"
    test_split: str = "test_2016_flickr"
    vocab_size: int = 8000
    tokenizer: Literal["bpe", "unigram"] = "bpe"
    max_len: int = 100  # pairs longer than this (in pieces) are counted and skipped

    def __post_init__(self) -> None:
        if self.vocab_size < 16:
            raise _fail("data.vocab_size", tr("must be >= 16, got {vocab_size}").format(vocab_size=self.vocab_size))
        if self.max_len <= 0:
            raise _fail("data.max_len", tr("must be a positive integer, got {max_len}").format(max_len=self.max_len))
        if self.src_lang == self.tgt_lang:
            raise _fail("data.tgt_lang", tr("must differ from src_lang ({src_lang!r})").format(src_lang=self.src_lang))


@dataclass(frozen=True)
class DecodeConfig:
    """Section 6.1: beam 4, length penalty alpha 0.6, maximum output length input + 50; the beam search
    of tensor2tensor (t2t: alive and finished hypotheses kept apart, early stopping) or this project's
    earlier one (slots: finished hypotheses occupy beam slots)."""

    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_offset: int = 50
    search: Literal["t2t", "slots"] = "t2t"
    precision: Literal["fp32", "auto", "bf16", "int8"] = "fp32"  # the step's products (core/decode_precision.py)

    def __post_init__(self) -> None:
        if self.beam_size <= 0:
            raise _fail("decode.beam_size", tr("must be a positive integer, got {beam_size}").format(beam_size=self.beam_size))
        if self.length_penalty < 0:
            raise _fail("decode.length_penalty", tr("must be >= 0, got {length_penalty}").format(length_penalty=self.length_penalty))
        if self.max_len_offset < 0:
            raise _fail("decode.max_len_offset", tr("must be >= 0, got {max_len_offset}").format(max_len_offset=self.max_len_offset))


@dataclass(frozen=True)
class RuntimeSettings:
    """settings.json's runtime options (and TMIN_LOG_LEVEL, --set settings.KEY=VALUE); a command's flag wins.

    `num_threads` has its one home here; config.toml `[train] num_threads` is read as this field (an alias).
    The device is not a runtime setting: it is config.toml `[train] device` (or `tmin train --device`)."""

    log_level: str = "INFO"
    num_threads: int = 0  # torch's threads for train and report (hardware.apply_num_threads); 0 = its default
    language: str = ""  # "en" or "zh" for tmin verify/report; empty: the locale (LANG); --lang wins

    def __post_init__(self) -> None:
        if self.language and self.language.lower().replace("_", "-").split("-")[0] not in ("en", "zh"):
            raise _fail("settings.language", tr("{language!r} is not one of 'en', 'zh'").format(language=self.language))
        if self.log_level.upper() not in LOG_LEVELS:
            raise _fail("settings.log_level", tr("{log_level!r} is not one of {items}").format(log_level=self.log_level, items=', '.join(LOG_LEVELS)))
        if self.num_threads < 0:
            raise _fail("settings.num_threads", tr("must be >= 0 (0 = torch's default), got {num_threads}").format(num_threads=self.num_threads))
