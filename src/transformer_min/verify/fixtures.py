"""The inputs several check modules share, in one place: the [model]-sized model and batch (memoised per run),
the tiny seeded model and batch, and copying our attention weights into torch.nn.MultiheadAttention.

Checks about the code's paper defaults build the tiny model (`tiny_model`) with everything else at the
paper's setting, so they stay fast whatever [model] config.toml holds.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model import attention
from transformer_min.model.transformer import Transformer, build_model
from transformer_min.verify.base import Context

TINY_VOCAB = 50


def full_model(ctx: Context) -> Transformer:
    """The [model] config's Transformer, seeded with [verify] seed, in eval mode (built once per run)."""
    def run():
        torch.manual_seed(ctx.cfg.verify.seed)
        return build_model(ctx.cfg).eval()
    return ctx.memo("full.model", run)


def full_batch(ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded token ids above pad/BOS/EOS at the [verify] sizes: src (B, S), tgt (B, T)."""
    v, voc = ctx.cfg.verify, ctx.cfg.vocab
    g = torch.Generator().manual_seed(v.seed)
    low = max(voc.pad_id, voc.bos_id, voc.eos_id) + 1
    src = torch.randint(low, voc.src_size, (v.batch_size, v.seq_len), generator=g)  # (B, S)
    tgt = torch.randint(low, voc.tgt_size, (v.batch_size, v.seq_len), generator=g)  # (B, T)
    return src, tgt


def tiny_config(**model_overrides) -> Config:
    """d_model 32, 4 heads, d_ff 64, N = 2, dropout 0, vocab 50; every other switch at the paper's value."""
    fields = dict(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=128)
    fields.update(model_overrides)
    return Config(model=ModelConfig(**fields), vocab=VocabConfig(src_size=TINY_VOCAB, tgt_size=TINY_VOCAB))


def tiny_model(seed: int = 0, **model_overrides) -> Transformer:
    """A seeded tiny Transformer in eval mode (see `tiny_config`)."""
    torch.manual_seed(seed)
    return build_model(tiny_config(**model_overrides)).eval()


def tiny_batch(seed: int = 0, batch: int = 2, src_len: int = 7, tgt_len: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids in [3, 50) (no pad, BOS or EOS): src (B, S), tgt (B, T)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(3, TINY_VOCAB, (batch, src_len), generator=g),
            torch.randint(3, TINY_VOCAB, (batch, tgt_len), generator=g))


def copy_attention_weights(ours: attention.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy our W^Q, W^K, W^V, W^O into torch.nn.MultiheadAttention (its in_proj is [W^Q; W^K; W^V])."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)
