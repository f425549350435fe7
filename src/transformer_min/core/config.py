"""Typed, validated configuration: config.toml (structure) + settings.json (runtime) + environment.

The defaults are the paper's base model (section 3, Table 3 "base"). Only `build_model` and the
command handlers read a `Config`; modules take explicit, paper-named arguments.

Precedence for runtime settings: command line, then environment, then settings.json (read by
`transformer_min.core.settings`, the one loader for every settings key; re-exported here).

The paper-reading posts' key names are accepted as aliases with a note (`ALIASES`), a flat JSON file of
hyperparameters (`--config hparams.json`) is mapped key by key to its section, and every unknown key of a
file is reported at once, a key of another section with the section it belongs in.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.schema import divisors, from_dict, hint, note, unknown_keys_error
from transformer_min.core.schema import fail as _fail
from transformer_min.core.settings import (  # noqa: F401 - re-exported: the settings API predates its module
    DEFAULT_CONFIG_NAME,
    DEFAULT_SETTINGS_NAME,
    LOG_LEVELS,
    RuntimeSettings,
    load_settings,
    parse_json_object,
    read_text_file,
    resolve_config_path,
)

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

log = logging.getLogger(__name__)


def head_dim(d_model: int, num_heads: int, given: int | None) -> int:
    """d_k or d_v as used: the given value, else d_model / num_heads (section 3.2.2). The one definition of
    the default: the configs below and model.attention.MultiHeadAttention both call it."""
    return given if given is not None else d_model // num_heads


class _HeadSizes:
    """d_k and d_v as used: the given value, else d_model / num_heads (section 3.2.2)."""

    d_model: int
    num_heads: int
    d_k: int | None
    d_v: int | None

    @property
    def head_dim_k(self) -> int:
        return head_dim(self.d_model, self.num_heads, self.d_k)

    @property
    def head_dim_v(self) -> int:
        return head_dim(self.d_model, self.num_heads, self.d_v)


@dataclass(frozen=True)
class ModelConfig(_HeadSizes):
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
    # sinusoidal = section 3.5; learned = Table 3 row E; rope = rotary (Su et al., 2021) on Q and K;
    # relative = Shaw et al. (2018) relative position representations, clipped at relative_clip
    positional: Literal["sinusoidal", "learned", "rope", "relative"] = "sinusoidal"
    relative_clip: int = 16  # k of Shaw et al. (2018): distances beyond +-k share one embedding
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
        if self.relative_clip <= 0:
            raise _fail("model.relative_clip", f"must be a positive integer (Shaw et al.'s k), got {self.relative_clip}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise _fail(
                "model.num_heads",
                f"{self.num_heads} does not divide d_model {self.d_model} (d_k = d_v = d_model / h, section "
                f"3.2.2); choose num_heads from {divisors(self.d_model)}",
            )
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value * self.num_heads != self.d_model and not self.free_head_dims:
                per_head = f"{self.d_model // self.num_heads}" if self.d_model % self.num_heads == 0 else \
                    f"{self.d_model}/{self.num_heads}"
                raise _fail(
                    f"model.{name}",
                    f"{value} != d_model / num_heads = {per_head} (section 3.2.2); remove {name} "
                    f"or set it to {per_head}, or set model.free_head_dims = true for Table 3 rows A/B",
                )

        if self.positional == "rope" and self.head_dim_k % 2:
            raise _fail("model.positional", f"\"rope\" rotates pairs of dimensions, so d_k must be even, got "
                        f"{self.head_dim_k}; fix: choose d_model and num_heads with an even d_model / num_heads")

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
class AttentionDemoConfig(_HeadSizes):
    """The paper-reading posts' single-attention demo: (seq_len, d_model) + PE through h heads.

    d_k and d_v default to d_model / h (section 3.2.2). Explicit values with h * d_k != d_model are
    accepted with a note: the paper's Table 3 rows A and B vary them.
    """

    d_model: int = 512
    num_heads: int = 8
    d_k: int | None = None  # None: d_model / num_heads
    d_v: int | None = None
    seq_len: int = 6
    batch_size: int = 2
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "seq_len", "batch_size", "d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise _fail(f"attention.{name}", f"must be a positive integer, got {value}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise _fail("attention.num_heads",
                        f"{self.num_heads} does not divide d_model {self.d_model} (d_k = d_v = d_model / h, "
                        f"section 3.2.2); choose num_heads from {divisors(self.d_model)}, or set both d_k and d_v")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value * self.num_heads != self.d_model:
                note(tr("[attention] num_heads * {name} = {heads} * {value} = {product} != d_model {d_model}: not "
                        "the paper's d_model / h (section 3.2.2), as in Table 3 rows A and B; W^O maps the "
                        "{width}-wide concatenation back to d_model").format(
                    name=name, heads=self.num_heads, value=value, product=self.num_heads * value, d_model=self.d_model,
                    width=self.num_heads * self.head_dim_v))


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
        if self.accum_steps > MAX_ACCUM_STEPS:  # each of them is a whole batch of batch_tokens
            raise _fail("train.accum_steps", f"{self.accum_steps:,} batches of {self.batch_tokens:,} tokens per step is "
                        f"more than {MAX_ACCUM_STEPS:,}; fix: use at most {MAX_ACCUM_STEPS:,} (the effective batch "
                        "is accum_steps * batch_tokens; the paper's is 25,000 tokens)")
        if not str(self.out_dir).strip():  # "" would scatter runs over the current folder
            raise _fail("train.out_dir", "is empty; fix: name the folder that holds the runs, e.g. out_dir = \"runs\"")
        if not 0 <= self.seed <= MAX_SEED:  # each rank seeds its stream with seed * 1000 + rank (int64)
            raise _fail("train.seed", f"must lie in [0, {MAX_SEED}], got {self.seed}; fix: pick a seed in that range, e.g. 1234")


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


_SECTIONS = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "source"}
_TABLES = {name: typing.get_type_hints(Config)[name] for name in _SECTIONS if name != "taotoken"}
SECTION_KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in _TABLES.items()}

# The paper-reading posts' key names -> ours, per section (read with a note naming ours).
ALIASES: dict[str, dict[str, str]] = {
    "model": {"n_heads": "num_heads", "max_seq_length": "max_len"},
    "attention": {"n_heads": "num_heads"},
    "vocab": {"src_vocab_size": "src_size", "tgt_vocab_size": "tgt_size"},
}
# A flat file of hyperparameters (post 003's JSON) puts a key found in several sections here first.
FLAT_ORDER = ("model", "vocab", "train", "decode", "data", "verify", "attention")


def key_homes(key: str, exclude: str = "") -> list[str]:
    """The sections (other than `exclude`) that have `key` or an alias of that name, in FLAT_ORDER."""
    return [name for name in FLAT_ORDER
            if name != exclude and (key in SECTION_KEYS[name] or key in ALIASES.get(name, {}))]


def _unknown_hint(section: str, key: str) -> str:
    """The fix for an unknown `section.key`: the section it belongs in, else the nearest key here."""
    homes = key_homes(key, exclude=section)
    if homes:
        return f"it belongs in {' or '.join(f'[{h}]' for h in homes)}; move it there"
    return hint(key, SECTION_KEYS[section])


def _canonical_table(section: str, table: dict, source: str, problems: list[tuple[str, str]]) -> dict:
    """`table` with the posts' names replaced by ours (with a note); unknown keys go to `problems`."""
    aliases = ALIASES.get(section, {})
    out = {}
    for key, value in table.items():
        if key in SECTION_KEYS[section]:
            out[key] = value
        elif key in aliases:
            canonical = aliases[key]
            if canonical in table:
                problems.append((f"{section}.{key}: another name for {section}.{canonical}, which is also set",
                                 f"keep only {canonical}"))
                continue
            note(tr("{source}: [{section}] {key} read as {canonical} (tmin's name; rename it to silence this note)"
                    ).format(source=source, section=section, key=key, canonical=canonical))
            out[canonical] = value
        else:
            problems.append((f"{section}.{key}: unknown key", _unknown_hint(section, key)))
    return out


def config_from_dict(data: dict, source: str = "dict") -> Config:
    """Validate a nested dict (a parsed config.toml or a checkpoint's embedded config).

    Every unknown key and section is reported in one error; the posts' key names (ALIASES) are read
    as ours with a note.
    """
    problems: list[tuple[str, str]] = []
    tables: dict[str, dict] = {}
    for name, value in data.items():
        if name == "source" and (source == "dict" or source.startswith("checkpoint ")):  # Config's own field
            continue
        if name not in _SECTIONS:
            homes = key_homes(name)
            if homes and not isinstance(value, dict):
                problems.append((f"{name}: a key outside any table",
                                 f"it belongs in {' or '.join(f'[{h}]' for h in homes)}; move it there"))
            else:
                problems.append((f"{name}: unknown section", hint(name, list(_SECTIONS))))
            continue
        if not isinstance(value, dict):
            raise _fail(name, f"expected a table [{name}], got {value!r}")
        if name == "taotoken":
            tables[name] = dict(value)
            continue
        tables[name] = _canonical_table(name, value, source, problems)
    if problems:
        raise unknown_keys_error("", problems)
    sections = {name: table if name == "taotoken" else from_dict(_TABLES[name], table, name)
                for name, table in tables.items()}
    return Config(**sections, source=source)


def flat_to_sections(data: dict, source: str) -> dict:
    """A flat dict of hyperparameters (post 003's JSON: {"d_model": 512, "warmup_steps": 4000, ...}) as
    config sections: each key goes to the first section of FLAT_ORDER that has it (or an alias of it).
    Tables ({"model": {...}}) pass through. Says where each key went in one note."""
    nested: dict[str, dict] = {}
    placed: dict[str, list[str]] = {}
    problems: list[tuple[str, str]] = []
    for key, value in data.items():
        if isinstance(value, dict) and key in _SECTIONS:
            nested.setdefault(key, {}).update(value)
            continue
        homes = key_homes(key)
        if not homes:
            from transformer_min.core.settings import CHANNEL_KEYS, RUNTIME_KEYS, SETTINGS_ALIASES

            everything = sorted({k for keys in SECTION_KEYS.values() for k in keys})
            if key in (*RUNTIME_KEYS, *CHANNEL_KEYS, *SETTINGS_ALIASES):  # a settings.json given as --config
                fix = "it is a settings.json key: pass that file with --settings, not --config / TMIN_CONFIG"
            else:
                fix = hint(key, everything)
            problems.append((f"'{key}': unknown key", fix))
            continue
        nested.setdefault(homes[0], {})[key] = value
        placed.setdefault(homes[0], []).append(key)
    if problems:
        raise unknown_keys_error("", problems)
    if placed:
        note(tr("{source} is a flat list of hyperparameters; read as {placement}").format(
            source=source, placement="; ".join(f"[{section}] {', '.join(keys)}" for section, keys in placed.items())))
    _free_flat_head_dims(nested.get("model", {}), source)
    return nested


def _free_flat_head_dims(model: dict, source: str) -> None:
    """A flat file writes d_k and d_v out (post 003: d_k = d_v = d_model / h = 64). Changing num_heads or d_model
    there leaves them behind: keep them as written, as [attention] does, with a note (Table 3 rows A and B),
    instead of refusing; in a TOML [model] table that still takes free_head_dims = true."""
    if "free_head_dims" in model:
        return
    d_model = model.get("d_model", ModelConfig.d_model)
    heads = model.get("num_heads", model.get("n_heads", ModelConfig.num_heads))
    off = [(name, model[name]) for name in ("d_k", "d_v")
           if all(type(v) is int and v > 0 for v in (model.get(name), d_model, heads))
           and model[name] * heads != d_model]
    if off:
        model["free_head_dims"] = True
        note(tr("{source}: {products} != d_model {d_model}: kept as written (model.free_head_dims), not the "
                "paper's d_model / h (section 3.2.2), as in Table 3 rows A and B; remove d_k and d_v to get "
                "d_model / num_heads").format(
            source=source, d_model=d_model,
            products=", ".join(f"num_heads * {name} = {heads} * {value} = {heads * value}" for name, value in off)))


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


def _parse_config_text(p: Path, text: str) -> dict:
    """A config file's text as a dict: TOML, or JSON for a .json file or text that starts with '{'."""
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        data = parse_json_object(p, text, "a JSON object {...} of hyperparameters or of tables")
        return flat_to_sections(data, str(p))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: TOML syntax error: {e}; fix that line") from None


def load_config(path: str | os.PathLike | None = None, env: dict | None = None) -> Config:
    """Load config.toml (or a JSON file of hyperparameters) into a validated `Config`.

    An explicitly named file (argument or TMIN_CONFIG) must exist. A missing default ./config.toml
    falls back to the built-in paper defaults and says so in the log.
    """
    env = os.environ if env is None else env
    explicit = bool(path) or bool(env.get("TMIN_CONFIG"))
    p = resolve_config_path(path, env)
    if not explicit and not p.exists():
        log.warning("%s", tr("no {path} found: using the built-in paper defaults (base model)").format(path=p))
        return Config()
    text = read_text_file(p, "config file")
    try:
        return config_from_dict(_parse_config_text(p, text), source=str(p))
    except ConfigError as e:
        message = str(e)
        raise ConfigError(message if message.startswith(str(p)) else f"{p}: {message}") from None


def with_overrides(cfg: Config, section: str, **values: Any) -> Config:
    """Return a copy of `cfg` with `section.key = value` for each non-None value (validated)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return cfg
    current = dataclasses.asdict(getattr(cfg, section))
    current.update(values)
    cls = typing.get_type_hints(Config)[section]
    return dataclasses.replace(cfg, **{section: from_dict(cls, current, section)})
