"""The structure sections of config.toml: [model], [vocab], [verify], [attention] (frozen, validated).

The defaults are the paper's base model (section 3, Table 3 "base"). Every error names the key path
(`model.num_heads`) and the fix; `transformer_min.core.keys` lists these sections with the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from transformer_min.core.i18n import tr
from transformer_min.core.schema import divisors, note
from transformer_min.core.schema import fail as _fail


class HeadSizes:
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


def head_dim(d_model: int, num_heads: int, given: int | None) -> int:
    """d_k or d_v as used: the given value, else d_model / num_heads (section 3.2.2). The one definition of
    the default: the configs below and model.attention.MultiHeadAttention both call it."""
    return given if given is not None else d_model // num_heads


@dataclass(frozen=True)
class ModelConfig(HeadSizes):
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
                raise _fail(f"model.{name}", tr("must be a positive integer, got {getattr}").format(getattr=getattr(self, name)))
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise _fail(f"model.{name}", tr("must be a positive integer, got {value}").format(value=value))
        for name in ("dropout", "attention_dropout"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise _fail(f"model.{name}", tr("must lie in [0, 1), got {p}").format(p=p))
        if self.layer_norm_eps <= 0:
            raise _fail("model.layer_norm_eps", tr("must be > 0, got {layer_norm_eps}").format(layer_norm_eps=self.layer_norm_eps))
        if self.relative_clip <= 0:
            raise _fail("model.relative_clip", tr("must be a positive integer (Shaw et al.'s k), got {relative_clip}").format(relative_clip=self.relative_clip))
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise _fail(
                "model.num_heads",
                tr("{num_heads} does not divide d_model {d_model} (d_k = d_v = d_model / h, section 3.2.2); choose num_heads from {divisors}").format(num_heads=self.num_heads, d_model=self.d_model, divisors=divisors(self.d_model)),
            )
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value * self.num_heads != self.d_model and not self.free_head_dims:
                per_head = f"{self.d_model // self.num_heads}" if self.d_model % self.num_heads == 0 else \
                    f"{self.d_model}/{self.num_heads}"
                raise _fail(
                    f"model.{name}",
                    tr("{value} != d_model / num_heads = {per_head} (section 3.2.2); remove {name} or set it to {per_head}, or set model.free_head_dims = true for Table 3 rows A/B").format(value=value, per_head=per_head, name=name),
                )

        if self.positional == "rope" and self.head_dim_k % 2:
            raise _fail("model.positional", tr('"rope" rotates pairs of dimensions, so d_k must be even, got {head_dim_k}; fix: choose d_model and num_heads with an even d_model / num_heads').format(head_dim_k=self.head_dim_k))

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
                raise _fail(f"vocab.{name}", tr("must be a positive integer, got {getattr}").format(getattr=getattr(self, name)))
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < min(self.src_size, self.tgt_size):
                raise _fail(f"vocab.{name}", tr("{value} must lie in [0, vocab size)").format(value=value))
        if len(set(ids.values())) != 3:
            raise _fail("vocab", tr("pad_id, bos_id and eos_id must differ, got {ids}").format(ids=ids))


@dataclass(frozen=True)
class VerifyConfig:
    """Sizes for `tmin verify` (the stages build the [model] at this batch and length)."""

    seq_len: int = 16
    batch_size: int = 2
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size"):
            if getattr(self, name) <= 0:
                raise _fail(f"verify.{name}", tr("must be a positive integer, got {getattr}").format(getattr=getattr(self, name)))


@dataclass(frozen=True)
class AttentionDemoConfig(HeadSizes):
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
                raise _fail(f"attention.{name}", tr("must be a positive integer, got {value}").format(value=value))
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise _fail("attention.num_heads",
                        tr("{num_heads} does not divide d_model {d_model} (d_k = d_v = d_model / h, section 3.2.2); choose num_heads from {divisors}, or set both d_k and d_v").format(num_heads=self.num_heads, d_model=self.d_model, divisors=divisors(self.d_model)))
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value * self.num_heads != self.d_model:
                note(tr("[attention] num_heads * {name} = {heads} * {value} = {product} != d_model {d_model}: not "
                        "the paper's d_model / h (section 3.2.2), as in Table 3 rows A and B; W^O maps the "
                        "{width}-wide concatenation back to d_model").format(
                    name=name, heads=self.num_heads, value=value, product=self.num_heads * value, d_model=self.d_model,
                    width=self.num_heads * self.head_dim_v))
