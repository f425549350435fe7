"""Eq. (1) step by step (section 3.2.1) inside multi-head attention (section 3.2.2), as page data.

    head_i = softmax(mask(Q_i K_i^T / sqrt(d_k))) V_i,  Q_i = X W_i^Q, K_i = X W_i^K, V_i = X W_i^V
    MultiHead(X) = Concat(head_1, ..., head_h) W^O

Every intermediate is kept: the page shows each as a heatmap. Two sources of X and the weights: the
[attention] demo of config.toml (random token vectors + the sinusoidal table of section 3.5, random
projections) and one attention module of a model (its own input, W^Q, W^K, W^V, W^O and biases).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_min.core.config import AttentionDemoConfig
from transformer_min.model.embeddings import sinusoidal_table
from transformer_min.model.masks import causal_mask
from transformer_min.viz.explore.tensors import ExploreInputError, pack
from transformer_min.core.i18n import tr

HEAD_CHOICES = (1, 2, 4, 8)  # the page's toggle for h
SEQ_LEN_CHOICES = (4, 6, 8, 12)  # the page's toggle for the demo's length (the config's seq_len is added)


@dataclass
class Projections:
    """W^Q, W^K (D, h d_k), W^V (D, h d_v), W^O (h d_v, D) in the paper's x W orientation, with biases."""

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor
    b_q: Tensor | None = None
    b_k: Tensor | None = None
    b_v: Tensor | None = None
    b_o: Tensor | None = None

    @classmethod
    def of_module(cls, mha) -> "Projections":
        """From a MultiHeadAttention's nn.Linear w_q, w_k, w_v, w_o (y = x W^T + b, so W = weight^T)."""
        get = (lambda lin: (lin.weight.detach().float().T, None if lin.bias is None else lin.bias.detach().float()))
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (get(m) for m in (mha.w_q, mha.w_k, mha.w_v, mha.w_o))
        return cls(wq, wk, wv, wo, bq, bk, bv, bo)


def _affine(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return x @ w if b is None else x @ w + b


def seq_len_choices(cfg: AttentionDemoConfig) -> list[int]:
    return sorted({*SEQ_LEN_CHOICES, cfg.seq_len})


def head_choices(d_model: int) -> list[int]:
    """The h of HEAD_CHOICES that divide d_model (d_k = d_model / h, section 3.2.2)."""
    return [h for h in HEAD_CHOICES if d_model % h == 0]


def demo_inputs(cfg: AttentionDemoConfig, seq_len: int) -> tuple[Tensor, Tensor, Projections]:
    """The demo's token vectors X (L, D) ~ N(0, 1), PE (L, D) and projections ~ N(0, 1/D), from cfg.seed.

    X is drawn for the longest length and cut, so a longer seq_len keeps the first rows."""
    d = cfg.d_model
    g = torch.Generator().manual_seed(cfg.seed)
    longest = max(seq_len_choices(cfg))
    x = torch.randn(longest, d, generator=g)[:seq_len]  # (L, D)
    w = [torch.randn(d, d, generator=g) * d ** -0.5 for _ in range(4)]  # W^Q, W^K, W^V, W^O: (D, D)
    return x, sinusoidal_table(seq_len, d), Projections(*w)


def head_steps(q: Tensor, k: Tensor, v: Tensor, scale: bool, mask: Tensor) -> dict[str, Tensor]:
    """One head, eq. (1): q (Lq, d_k), k (Lk, d_k), v (Lk, d_v), mask (Lq, Lk) True = may attend."""
    scores = q @ k.T  # (Lq, Lk)
    scaled = scores / math.sqrt(q.size(-1)) if scale else scores  # footnote 4: without it softmax saturates
    masked = scaled.masked_fill(~mask, float("-inf"))  # section 3.2.3
    weights = torch.softmax(masked, dim=-1)  # over the keys
    return {"scores": scores, "scaled": scaled, "mask": mask.float(), "masked": masked,
            "weights": weights, "out": weights @ v}  # out (Lq, d_v)


def multi_head_steps(x_q: Tensor, x_kv: Tensor, p: Projections, num_heads: int, scale: bool,
                     mask: Tensor) -> tuple[dict[str, Tensor], dict]:
    """x_q (Lq, D), x_kv (Lk, D) -> (the shared Q, K, V (L, h d)), the per-head steps, Concat and W^O."""
    q, k, v = _affine(x_q, p.w_q, p.b_q), _affine(x_kv, p.w_k, p.b_k), _affine(x_kv, p.w_v, p.b_v)
    dk, dv = q.size(-1) // num_heads, v.size(-1) // num_heads
    heads = [head_steps(q[:, i * dk:(i + 1) * dk], k[:, i * dk:(i + 1) * dk], v[:, i * dv:(i + 1) * dv],
                        scale, mask) for i in range(num_heads)]
    concat = torch.cat([h["out"] for h in heads], dim=-1)  # (Lq, h d_v)
    output = _affine(concat, p.w_o, p.b_o)  # (Lq, D)
    saturation = float(torch.stack([h["weights"].max(-1).values.mean() for h in heads]).mean())
    combo = {"num_heads": num_heads, "d_k": dk, "d_v": dv, "scale": scale,
             "heads": [{name: pack(t) for name, t in h.items()} for h in heads],
             "concat": pack(concat), "output": pack(output), "saturation": saturation}
    return {"Q": q, "K": k, "V": v}, combo


def demo_equation(cfg: AttentionDemoConfig, seq_len: int, num_heads: int, scale: bool, causal: bool) -> dict:
    """The [attention] demo at one setting of the page's toggles -> {"shared": ..., "combo": ...}."""
    if seq_len not in seq_len_choices(cfg):
        raise ExploreInputError(tr("seq_len = {seq_len}: choose one of {seq_len_choices}").format(seq_len=seq_len, seq_len_choices=seq_len_choices(cfg)))
    if num_heads not in head_choices(cfg.d_model):
        raise ExploreInputError(tr("heads = {num_heads}: choose one of {head_choices} (they divide attention.d_model = {d_model})").format(num_heads=num_heads, head_choices=head_choices(cfg.d_model), d_model=cfg.d_model))
    x, pe, p = demo_inputs(cfg, seq_len)
    mask = causal_mask(seq_len) if causal else torch.ones(seq_len, seq_len, dtype=torch.bool)
    qkv, combo = multi_head_steps(x + pe, x + pe, p, num_heads, scale, mask)
    shared = {"X": pack(x), "PE": pack(pe), "XPE": pack(x + pe), **{n: pack(t) for n, t in qkv.items()}}
    return {"source": "demo", "seq_len": seq_len, "causal": causal, "shared": shared, "combo": combo}
