"""The layers of section 3.1 assembled from their parts: the attention class model.positional names
(model/variants.py), the feed-forward network of section 3.3 and the Add & Norm settings."""

from __future__ import annotations

from typing import Any

from transformer_min.model.attention import MultiHeadAttention
from transformer_min.model.feed_forward import PositionwiseFeedForward
from transformer_min.model.layers import DecoderLayer, EncoderLayer


def attention(d_model: int, num_heads: int, d_k: int | None = None, d_v: int | None = None,
              attention_dropout: float = 0.0, bias: bool = True, kernel: str = "fused",
              cls: type[MultiHeadAttention] = MultiHeadAttention,
              options: dict[str, Any] | None = None) -> MultiHeadAttention:
    """One attention module of class `cls` (its extra arguments, e.g. relative_clip, in `options`)."""
    return cls(d_model, num_heads, d_k, d_v, attention_dropout, bias, kernel, **(options or {}))


def encoder_layer(d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, attention_dropout: float = 0.0,
                  d_k: int | None = None, d_v: int | None = None, norm_first: bool = False,
                  layer_norm_eps: float = 1e-5, bias: bool = True, kernel: str = "fused",
                  self_attention: type[MultiHeadAttention] = MultiHeadAttention,
                  options: dict[str, Any] | None = None) -> EncoderLayer:
    """Section 3.1: self-attention (class `self_attention`) and the FFN, each with Add & Norm."""
    self_attn = attention(d_model, num_heads, d_k, d_v, attention_dropout, bias, kernel, self_attention, options)
    ffn = PositionwiseFeedForward(d_model, d_ff, bias=bias)
    return EncoderLayer(self_attn, ffn, d_model, dropout, norm_first, layer_norm_eps)


def decoder_layer(d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, attention_dropout: float = 0.0,
                  d_k: int | None = None, d_v: int | None = None, norm_first: bool = False,
                  layer_norm_eps: float = 1e-5, bias: bool = True, kernel: str = "fused",
                  self_attention: type[MultiHeadAttention] = MultiHeadAttention,
                  options: dict[str, Any] | None = None) -> DecoderLayer:
    """Section 3.1: masked self-attention (class `self_attention`), encoder-decoder attention (always
    the plain MultiHeadAttention, 3.2.3) and the FFN, each with Add & Norm."""
    self_attn = attention(d_model, num_heads, d_k, d_v, attention_dropout, bias, kernel, self_attention, options)
    cross_attn = attention(d_model, num_heads, d_k, d_v, attention_dropout, bias, kernel)
    ffn = PositionwiseFeedForward(d_model, d_ff, bias=bias)
    return DecoderLayer(self_attn, cross_attn, ffn, d_model, dropout, norm_first, layer_norm_eps)
