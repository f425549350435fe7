"""Typed, validated configuration: config.toml (structure) + settings.json (runtime) + environment.

The defaults are the paper's base model (section 3, Table 3 "base"). Only `build_model` and the
command handlers read a `Config`; modules take explicit, paper-named arguments.

Precedence for runtime settings: command line, then environment, then settings.json.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformer_min.errors import ConfigError
from transformer_min.schema import fail as _fail
from transformer_min.schema import from_dict, suggest

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_NAME = "config.toml"
DEFAULT_SETTINGS_NAME = "settings.json"


@dataclass(frozen=True)
class ModelConfig:
    """Section 3 hyperparameters (paper names) and the switches for the paper's open choices."""

    d_model: int = 512
    num_heads: int = 8
    d_k: int | None = None  # None: d_model / num_heads (section 3.2.2)
    d_v: int | None = None
    free_head_dims: bool = False  # allow d_k != d_model / h, as in Table 3 row B
    d_ff: int = 2048
    num_layers: int = 6  # N, for both stacks
    dropout: float = 0.1  # P_drop, section 5.4
    attention_dropout: float = 0.0  # Deviation: not in the paper (default 0 keeps the paper)
    max_len: int = 512
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # learned = Table 3 row E
    norm: Literal["post", "pre"] = "post"  # post = section 3.1 LayerNorm(x + Sublayer(x))
    weight_tying: Literal["three_way", "decoder", "none"] = "three_way"  # section 3.4
    layer_norm_eps: float = 1e-5  # not given in the paper
    bias: bool = True  # biases in the attention and FFN projections (not stated in the paper)
    final_norm: bool | None = None  # None: only with pre-norm (the paper has none)

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "d_ff", "num_layers", "max_len"):
            if getattr(self, name) <= 0:
                raise _fail(f"model.{name}", f"must be a positive integer, got {getattr(self, name)}")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise _fail(f"model.{name}", f"must be a positive integer, got {value}")
        for name in ("dropout", "attention_dropout"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise _fail(f"model.{name}", f"must lie in [0, 1), got {p}")
        if self.layer_norm_eps <= 0:
            raise _fail("model.layer_norm_eps", f"must be > 0, got {self.layer_norm_eps}")
        if self.d_model % self.num_heads != 0:
            raise _fail(
                "model.num_heads",
                f"{self.num_heads} does not divide d_model {self.d_model}; "
                f"choose num_heads from {_divisors(self.d_model)}",
            )
        per_head = self.d_model // self.num_heads
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value != per_head and not self.free_head_dims:
                raise _fail(
                    f"model.{name}",
                    f"{value} != d_model / num_heads = {per_head} (section 3.2.2); remove {name} "
                    f"or set it to {per_head}, or set model.free_head_dims = true for Table 3 row B",
                )

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    @property
    def use_final_norm(self) -> bool:
        return self.norm == "pre" if self.final_norm is None else self.final_norm


@dataclass(frozen=True)
class VocabConfig:
    """Vocabulary sizes and reserved ids. Section 5.1: a shared BPE vocabulary of about 37000."""

    src_size: int = 37000
    tgt_size: int = 37000
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        for name in ("src_size", "tgt_size"):
            if getattr(self, name) <= 0:
                raise _fail(f"vocab.{name}", f"must be a positive integer, got {getattr(self, name)}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < min(self.src_size, self.tgt_size):
                raise _fail(f"vocab.{name}", f"{value} must lie in [0, vocab size)")
        if len(set(ids.values())) != 3:
            raise _fail("vocab", f"pad_id, bos_id and eos_id must differ, got {ids}")


@dataclass(frozen=True)
class VerifyConfig:
    """Sizes for `tmin verify` (the stages build the [model] at this batch and length)."""

    seq_len: int = 16
    batch_size: int = 2
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size"):
            if getattr(self, name) <= 0:
                raise _fail(f"verify.{name}", f"must be a positive integer, got {getattr(self, name)}")


@dataclass(frozen=True)
class AttentionDemoConfig:
    """The paper-reading posts' single-attention demo: (seq_len, d_model) + PE through h heads."""

    d_model: int = 512
    num_heads: int = 8
    d_k: int = 64
    d_v: int = 64
    seq_len: int = 6
    batch_size: int = 2
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "d_k", "d_v", "seq_len", "batch_size"):
            if getattr(self, name) <= 0:
                raise _fail(f"attention.{name}", f"must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.num_heads != 0:
            raise _fail("attention.num_heads", f"{self.num_heads} does not divide d_model {self.d_model}")
        per_head = self.d_model // self.num_heads
        for name in ("d_k", "d_v"):
            if getattr(self, name) != per_head:
                raise _fail(f"attention.{name}", f"{getattr(self, name)} != d_model / num_heads = {per_head}")


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
    num_threads: int = 0  # torch.set_num_threads; 0 = leave torch's default

    def __post_init__(self) -> None:
        for name in ("steps", "batch_tokens", "warmup_steps", "eval_interval", "checkpoint_interval",
                     "accum_steps", "keep_last"):
            if getattr(self, name) <= 0:
                raise _fail(f"train.{name}", f"must be a positive integer, got {getattr(self, name)}")
        if self.lr_factor <= 0:
            raise _fail("train.lr_factor", f"must be > 0, got {self.lr_factor}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise _fail("train.label_smoothing", f"must lie in [0, 1), got {self.label_smoothing}")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise _fail("train.betas", f"must be two numbers in [0, 1), got {list(self.betas)}")
        if self.eps <= 0:
            raise _fail("train.eps", f"must be > 0, got {self.eps}")
        for name in ("clip", "weight_decay", "time_budget_minutes", "patience", "num_threads"):
            if getattr(self, name) < 0:
                raise _fail(f"train.{name}", f"must be >= 0, got {getattr(self, name)}")


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
            raise _fail("data.vocab_size", f"must be >= 16, got {self.vocab_size}")
        if self.max_len <= 0:
            raise _fail("data.max_len", f"must be a positive integer, got {self.max_len}")
        if self.src_lang == self.tgt_lang:
            raise _fail("data.tgt_lang", f"must differ from src_lang ({self.src_lang!r})")


@dataclass(frozen=True)
class DecodeConfig:
    """Section 6.1: beam 4, length penalty alpha 0.6, maximum output length input + 50; the beam search
    of tensor2tensor (t2t: alive and finished hypotheses kept apart, early stopping) or this project's
    earlier one (slots: finished hypotheses occupy beam slots)."""

    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_offset: int = 50
    search: Literal["t2t", "slots"] = "t2t"

    def __post_init__(self) -> None:
        if self.beam_size <= 0:
            raise _fail("decode.beam_size", f"must be a positive integer, got {self.beam_size}")
        if self.length_penalty < 0:
            raise _fail("decode.length_penalty", f"must be >= 0, got {self.length_penalty}")
        if self.max_len_offset < 0:
            raise _fail("decode.max_len_offset", f"must be >= 0, got {self.max_len_offset}")


@dataclass(frozen=True)
class Config:
    """Everything config.toml holds. `taotoken` is the LLM channel's table, validated by the channel."""

    model: ModelConfig = field(default_factory=ModelConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    attention: AttentionDemoConfig = field(default_factory=AttentionDemoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    taotoken: dict = field(default_factory=dict)
    source: str = "built-in paper defaults"

    def __post_init__(self) -> None:
        if self.model.weight_tying == "three_way" and self.vocab.src_size != self.vocab.tgt_size:
            raise _fail(
                "model.weight_tying",
                f"three_way tying needs a shared vocabulary (section 3.4) but vocab.src_size "
                f"{self.vocab.src_size} != vocab.tgt_size {self.vocab.tgt_size}; "
                "set equal sizes or weight_tying = \"decoder\"",
            )


_SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0]


def config_from_dict(data: dict, source: str = "dict") -> Config:
    """Validate a nested dict (a parsed config.toml or a checkpoint's embedded config)."""
    sections = {}
    for name, value in data.items():
        if name == "source":
            continue
        if name not in _SECTIONS:
            raise _fail(name, f"unknown section{suggest(name, [s for s in _SECTIONS if s != 'source'])}")
        if not isinstance(value, dict):
            raise _fail(name, f"expected a table [{name}], got {value!r}")
        if name == "taotoken":
            sections[name] = dict(value)
            continue
        cls = typing.get_type_hints(Config)[name]
        sections[name] = from_dict(cls, value, name)
    return Config(**sections, source=source)


def config_to_dict(cfg: Config) -> dict:
    """The inverse of `config_from_dict` (tuples become lists; the channel table is left out)."""
    out = dataclasses.asdict(cfg)
    out.pop("source", None)
    out.pop("taotoken", None)
    for section in out.values():
        for key, value in list(section.items()):
            if isinstance(value, tuple):
                section[key] = list(value)
    return out


def resolve_config_path(path: str | os.PathLike | None, env: dict | None = None) -> Path:
    """--config PATH, else $TMIN_CONFIG, else ./config.toml."""
    env = os.environ if env is None else env
    if path:
        return Path(path)
    if env.get("TMIN_CONFIG"):
        return Path(env["TMIN_CONFIG"])
    return Path(DEFAULT_CONFIG_NAME)


def load_config(path: str | os.PathLike | None = None, env: dict | None = None) -> Config:
    """Load config.toml into a validated `Config`.

    An explicitly named file (argument or TMIN_CONFIG) must exist. A missing default ./config.toml
    falls back to the built-in paper defaults and says so in the log.
    """
    env = os.environ if env is None else env
    explicit = bool(path) or bool(env.get("TMIN_CONFIG"))
    p = resolve_config_path(path, env)
    if not p.exists():
        if explicit:
            raise ConfigError(f"{p}: config file not found; check --config / TMIN_CONFIG")
        log.warning("no %s found: using the built-in paper defaults (base model)", p)
        return Config()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: TOML syntax error: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read config file: {e}") from None
    try:
        return config_from_dict(data, source=str(p))
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def with_overrides(cfg: Config, section: str, **values: Any) -> Config:
    """Return a copy of `cfg` with `section.key = value` for each non-None value (validated)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return cfg
    current = dataclasses.asdict(getattr(cfg, section))
    current.update(values)
    cls = typing.get_type_hints(Config)[section]
    return dataclasses.replace(cfg, **{section: from_dict(cls, current, section)})


# ---------------------------------------------------------------------------------------------
# settings.json: runtime options (the channel reads its own keys from the same file)
# ---------------------------------------------------------------------------------------------

CHANNEL_SETTING_KEYS = {"api_base", "api_key", "model", "timeout", "protocol"}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class RuntimeSettings:
    """Runtime options from settings.json (and TMIN_LOG_LEVEL); the CLI flag wins over both."""

    log_level: str = "INFO"
    device: str = "auto"
    num_threads: int = 0
    language: str = ""  # "en" or "zh" for tmin verify/report; empty: the locale (LANG); --lang wins

    def __post_init__(self) -> None:
        if self.log_level.upper() not in LOG_LEVELS:
            raise _fail("settings.log_level", f"{self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise _fail("settings.device", f"{self.device!r} is not one of 'auto', 'cpu', 'cuda'")
        if self.language and self.language.lower().replace("_", "-").split("-")[0] not in ("en", "zh"):
            raise _fail("settings.language", f"{self.language!r} is not one of 'en', 'zh'")


def load_settings(path: str | os.PathLike | None = None, env: dict | None = None) -> RuntimeSettings:
    """Read settings.json (default ./settings.json, optional); environment TMIN_LOG_LEVEL overrides."""
    env = os.environ if env is None else env
    p = Path(path) if path else Path(DEFAULT_SETTINGS_NAME)
    data: dict = {}
    if p.exists():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}: JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a JSON object at the top level")
    elif path:
        raise ConfigError(f"{p}: settings file not found; check --settings")
    runtime = {k: v for k, v in data.items() if k not in CHANNEL_SETTING_KEYS}
    if env.get("TMIN_LOG_LEVEL"):
        runtime["log_level"] = env["TMIN_LOG_LEVEL"]
    try:
        return from_dict(RuntimeSettings, runtime, "settings")
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
