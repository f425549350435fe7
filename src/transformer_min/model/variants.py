"""Where positions enter the model: the registry from the config value model.positional to its parts.

Each entry names the absolute encoding added to the embeddings (section 3.5; "none" adds nothing) and the
self-attention class of the encoder and the decoder. Encoder-decoder attention is always the plain
MultiHeadAttention (section 3.2.3). A new variant is one new class, one entry here and one value of
model.positional in core/config.py; layers.py and transformer.py do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformer_min.core.config import ModelConfig
from transformer_min.core.i18n import tr
from transformer_min.model.attention import MultiHeadAttention
from transformer_min.model.embeddings import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    PositionalBase,
    SinusoidalPositionalEncoding,
)
from transformer_min.model.relative import RelativeAttention
from transformer_min.model.rotary import RotaryAttention


@dataclass(frozen=True)
class PositionalVariant:
    """One value of model.positional: what is added to the embeddings, which class self-attends."""

    encoding: type[PositionalBase]
    self_attention: type[MultiHeadAttention]
    source: str  # where the variant comes from, for `tmin verify` and the docs


POSITIONAL_VARIANTS: dict[str, PositionalVariant] = {
    "sinusoidal": PositionalVariant(SinusoidalPositionalEncoding, MultiHeadAttention, "section 3.5"),
    "learned": PositionalVariant(LearnedPositionalEncoding, MultiHeadAttention, "Table 3 row E"),
    "rope": PositionalVariant(NoPositionalEncoding, RotaryAttention, "Su et al. (2021), RoFormer"),
    "relative": PositionalVariant(NoPositionalEncoding, RelativeAttention, "Shaw et al. (2018)"),
}


def variant(name: str) -> PositionalVariant:
    """The registry entry of model.positional = `name` (the config has validated the name)."""
    return POSITIONAL_VARIANTS[name]


def attention_options(m: ModelConfig) -> dict[str, Any]:
    """The extra keyword arguments the self-attention class of `m.positional` takes from the config."""
    return {name: getattr(m, name) for name in variant(m.positional).self_attention.config_fields}


def describe(m: ModelConfig) -> str:
    """One line for `tmin verify`, in the current language, e.g.
    `positional: relative (Shaw et al. (2018); NoPositionalEncoding + RelativeAttention, relative_clip = 16)`."""
    v = variant(m.positional)
    opts = "".join(f", {k} = {val}" for k, val in attention_options(m).items())
    return tr("positional: {name} ({source}; {encoding} + {attention}{options})").format(
        name=m.positional, source=tr(v.source), encoding=v.encoding.__name__, attention=v.self_attention.__name__,
        options=opts)
