"""Encoder and decoder stacks and the full Transformer, section 3.1 (Figure 1); `build_model`."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.embeddings import POSITIONAL_ENCODINGS, TokenEmbedding
from transformer_min.core.errors import ConfigError, ModelInputError
from transformer_min.model.layers import DecoderLayer, EncoderLayer, LayerCache, debug_shape
from transformer_min.model.masks import padding_mask, target_mask


class Encoder(nn.Module):
    """A stack of N identical encoder layers (section 3.1). No final LayerNorm unless pre-norm."""

    def __init__(self, layers: list[EncoderLayer], final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        for i, layer in enumerate(layers):
            layer.trace_name = f"encoder.layers.{i}"  # its path in Transformer, for the per-sub-layer trace

    def forward(self, x: Tensor, mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """x (B, S, D) -> (B, S, D), per-layer self-attention weights [(B, H, S, S)] if asked."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights)
            if need_weights:
                weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, weights


class Decoder(nn.Module):
    """A stack of N identical decoder layers; every layer attends to the same encoder output."""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        for i, layer in enumerate(layers):
            layer.trace_name = f"decoder.layers.{i}"

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None, tgt_mask: Tensor | None,
                need_weights: bool = False, cache: list[LayerCache] | None = None
                ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """x (B, T, D), memory (B, S, D) -> (B, T, D), [self (B, H, T, T)], [cross (B, H, T, S)]."""
        self_ws, cross_ws = [], []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(x, memory, src_mask, tgt_mask, need_weights, None if cache is None else cache[i])
            if need_weights:
                self_ws.append(sw)
                cross_ws.append(cw)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, self_ws, cross_ws


class Attention(NamedTuple):
    """Per-layer attention weights returned by `Transformer.forward(..., return_attention=True)`."""

    encoder: list[Tensor]  # [(B, H, S, S)] * N
    decoder_self: list[Tensor]  # [(B, H, T, T)] * N
    cross: list[Tensor]  # [(B, H, T, S)] * N


class Transformer(nn.Module):
    """The encoder-decoder Transformer of section 3 (Figure 1) with its generator (section 3.4).

    logits = Linear(Decoder(Embed(tgt) + PE, Encoder(Embed(src) + PE)))  (softmax left to the loss)
    With three-way tying (section 3.4) the source embedding, the target embedding and the
    pre-softmax projection share one weight matrix (a shared vocabulary). No output bias.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 512, num_heads: int = 8,
                 d_ff: int = 2048, num_layers: int = 6, dropout: float = 0.1,
                 attention_dropout: float = 0.0, d_k: int | None = None, d_v: int | None = None,
                 max_len: int = 512, positional: str = "sinusoidal", norm_first: bool = False,
                 weight_tying: str = "three_way", layer_norm_eps: float = 1e-5, bias: bool = True,
                 final_norm: bool = False, pad_id: int = 0):
        super().__init__()
        if weight_tying == "three_way" and src_vocab != tgt_vocab:
            raise ModelInputError("three-way weight tying needs src_vocab == tgt_vocab (section 3.4)")
        self.pad_id = pad_id
        self.d_model = d_model
        self.src_embed = TokenEmbedding(src_vocab, d_model)
        self.tgt_embed = self.src_embed if weight_tying == "three_way" else TokenEmbedding(tgt_vocab, d_model)
        pe_cls = POSITIONAL_ENCODINGS[positional]
        self.src_pos = pe_cls(d_model, max_len, dropout)  # 5.4: dropout on embeddings + PE
        self.tgt_pos = pe_cls(d_model, max_len, dropout)
        layer_args = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                          attention_dropout=attention_dropout, d_k=d_k, d_v=d_v,
                          norm_first=norm_first, layer_norm_eps=layer_norm_eps, bias=bias)
        norm = (lambda: nn.LayerNorm(d_model, eps=layer_norm_eps)) if final_norm else (lambda: None)
        self.encoder = Encoder([EncoderLayer(**layer_args) for _ in range(num_layers)], norm())
        self.decoder = Decoder([DecoderLayer(**layer_args) for _ in range(num_layers)], norm())
        self.generator = nn.Linear(d_model, tgt_vocab, bias=False)  # pre-softmax linear, not scaled
        self._init_linear_weights()
        if weight_tying in ("three_way", "decoder"):
            self.generator.weight = self.tgt_embed.weight  # 3.4: shared with the target embedding

    def _init_linear_weights(self) -> None:
        """Gap the paper leaves: initialisation. Xavier-uniform weights and zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.generator:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def _check_tokens(self, tokens: Tensor, embed: TokenEmbedding, name: str) -> None:
        if torch.compiler.is_compiling() or tokens.numel() == 0:
            return
        hi, lo = int(tokens.max()), int(tokens.min())
        if hi >= embed.vocab_size or lo < 0:
            bad = hi if hi >= embed.vocab_size else lo
            raise ModelInputError(
                f"{name} token id {bad} is outside the vocabulary [0, {embed.vocab_size}); "
                "check vocab.src_size / vocab.tgt_size against your tokenizer"
            )

    def encode(self, src: Tensor, src_mask: Tensor | None = None,
               need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """src (B, S) -> memory (B, S, D), encoder self-attention weights."""
        self._check_tokens(src, self.src_embed, "source")
        x = self.src_pos(self.src_embed(src))  # (B, S, D)
        debug_shape("encoder.embed+pe", x)
        return self.encoder(x, src_mask, need_weights)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, tgt_mask: Tensor | None,
               need_weights: bool = False, cache: list[LayerCache] | None = None,
               offset: int = 0) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """tgt (B, T) at positions offset.. -> hidden (B, T, D), self and cross weights."""
        self._check_tokens(tgt, self.tgt_embed, "target")
        y = self.tgt_pos(self.tgt_embed(tgt), offset=offset)  # (B, T, D)
        debug_shape("decoder.embed+pe", y)
        return self.decoder(y, memory, src_mask, tgt_mask, need_weights, cache)

    def new_cache(self) -> list[LayerCache]:
        """An empty per-layer key/value cache for incremental decoding."""
        return [LayerCache() for _ in self.decoder.layers]

    def forward(self, src: Tensor, tgt: Tensor, return_attention: bool = False):
        """src (B, S), tgt (B, T) (the output shifted right) -> logits (B, T, V_tgt).

        With return_attention=True, returns (logits, Attention) with every layer's weights.
        """
        src_mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        memory, enc_w = self.encode(src, src_mask, return_attention)
        hidden, self_w, cross_w = self.decode(tgt, memory, src_mask, target_mask(tgt, self.pad_id),
                                              return_attention)
        logits = self.generator(hidden)  # (B, T, V)
        debug_shape("generator.logits", logits)
        if return_attention:
            return logits, Attention(enc_w, self_w, cross_w)
        return logits


def build_model(cfg: Config) -> Transformer:
    """The factory: the only place where config becomes modules.

    Refuses, before allocating anything, a model whose parameters and buffers would not fit in memory
    (`check_model_memory`); on the meta device (parameter counting) nothing is allocated, so nothing is checked.
    """
    if torch.empty(()).device.type != "meta":
        check_model_memory(cfg)
    m = cfg.model
    try:
        return Transformer(
            src_vocab=cfg.vocab.src_size, tgt_vocab=cfg.vocab.tgt_size, d_model=m.d_model,
            num_heads=m.num_heads, d_ff=m.d_ff, num_layers=m.num_layers, dropout=m.dropout,
            attention_dropout=m.attention_dropout, d_k=m.d_k, d_v=m.d_v, max_len=m.max_len,
            positional=m.positional, norm_first=m.norm == "pre", weight_tying=m.weight_tying,
            layer_norm_eps=m.layer_norm_eps, bias=m.bias, final_norm=m.use_final_norm,
            pad_id=cfg.vocab.pad_id,
        )
    except (MemoryError, RuntimeError) as e:  # the estimate fitted, the allocation did not
        if not isinstance(e, MemoryError) and "alloc" not in str(e).lower() and "memory" not in str(e).lower():
            raise
        raise ConfigError(f"not enough memory to build the model ({estimate_model_bytes(cfg) / 1e9:,.2f} GB of "
                          f"parameters and buffers in fp32); fix: {_size_fix(cfg)}") from None


def count_model_values(m: ModelConfig, v: VocabConfig) -> int:
    """Parameters plus buffers that `build_model` allocates, in closed form (no torch).

    Section 3.2.2: each attention has W^Q, W^K (d_model x h d_k), W^V (d_model x h d_v), W^O (h d_v x d_model);
    3.3: the FFN has d_model x d_ff twice; 3.1: two LayerNorms per encoder layer, three per decoder layer;
    3.4: embeddings V x d_model (shared per `weight_tying`); 3.5: one (max_len x d_model) positional table
    per stack (a buffer when sinusoidal, parameters when learned).
    """
    d, h, dk, dv, f = m.d_model, m.num_heads, m.head_dim_k, m.head_dim_v, m.d_ff
    attention = d * h * (2 * dk + dv) + h * dv * d + (h * (2 * dk + dv) + d if m.bias else 0)
    ffn = 2 * d * f + (f + d if m.bias else 0)
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    final_norms = 2 * 2 * d if m.use_final_norm else 0
    embeddings = v.src_size * d + (0 if m.weight_tying == "three_way" else v.tgt_size * d)
    generator = v.tgt_size * d if m.weight_tying == "none" else 0
    positions = 2 * m.max_len * d
    return embeddings + generator + positions + m.num_layers * (encoder_layer + decoder_layer) + final_norms


def estimate_model_bytes(cfg: Config, bytes_per_value: int = 4) -> int:
    """Bytes of the model's parameters and buffers (fp32 by default)."""
    return count_model_values(cfg.model, cfg.vocab) * bytes_per_value


def available_memory_bytes() -> int | None:
    """Memory available to a new allocation (Linux MemAvailable, else physical memory; None if unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


# The fields each size grows with; the one furthest above its built-in (paper) default is named in the fix.
MODEL_SIZE_FIELDS = ("model.d_model", "model.max_len", "model.d_ff", "model.num_layers", "model.num_heads",
                     "model.d_k", "model.d_v", "vocab.src_size", "vocab.tgt_size")
STAGE_SIZE_FIELDS = {
    "attention": ("attention.d_model", "attention.num_heads", "attention.d_k", "attention.d_v", "attention.seq_len",
                  "attention.batch_size"),
    "verify": ("verify.seq_len", "verify.batch_size", "model.d_model", "model.d_ff", "model.num_heads",
               "vocab.tgt_size"),
}


def _field_value(cfg: Config, name: str) -> int:
    section, key = name.split(".")
    return getattr(getattr(cfg, section), {"d_k": "head_dim_k", "d_v": "head_dim_v"}.get(key, key))


def _largest_field(cfg: Config, fields: tuple[str, ...]) -> tuple[str, int, int]:
    """(name, value, built-in default) of the field furthest above its default."""
    base = Config()
    name = max(fields, key=lambda n: _field_value(cfg, n) / _field_value(base, n))
    return name, _field_value(cfg, name), _field_value(base, name)


def _size_fix(cfg: Config, fields: tuple[str, ...] = MODEL_SIZE_FIELDS) -> str:
    name, value, default = _largest_field(cfg, fields)
    return f"lower {name} (now {value:,}; the built-in paper default is {default:,})"


def estimate_stage_bytes(cfg: Config) -> dict[str, int]:
    """Lower bounds (fp32) of the largest tensors `tmin verify` makes beside the model: the [attention] demo's
    input (B, L, D), weights (B, h, L, L) and projections (4 d_model x h d_k), and the stages' activations at
    [verify] sizes: (B, L, max(d_model, d_ff, vocab)) and the attention weights (B, h, L, L)."""
    a, v, m = cfg.attention, cfg.verify, cfg.model
    demo = (a.batch_size * a.seq_len * a.d_model + a.batch_size * a.num_heads * a.seq_len ** 2
            + 4 * a.d_model * a.num_heads * max(a.head_dim_k, a.head_dim_v))
    stages = (v.batch_size * v.seq_len * max(m.d_model, m.d_ff, cfg.vocab.tgt_size)
              + v.batch_size * m.num_heads * v.seq_len ** 2)
    return {"attention": 4 * demo, "verify": 4 * stages}


def check_model_memory(cfg: Config, available: int | None = None, stages: bool = False) -> None:
    """ConfigError naming the figure (GB) and the field when the parameters and buffers of `cfg`'s model
    (and, with `stages`, the tensors `tmin verify` makes at [attention] and [verify] sizes) would not fit in
    the memory available (`available` bytes; default: what the machine has free now)."""
    needs = {"the model's parameters and buffers": (estimate_model_bytes(cfg), MODEL_SIZE_FIELDS)}
    if stages:
        sizes = estimate_stage_bytes(cfg)
        needs["the [attention] demo's tensors"] = (sizes["attention"], STAGE_SIZE_FIELDS["attention"])
        needs["the stages' tensors at [verify] sizes"] = (sizes["verify"], STAGE_SIZE_FIELDS["verify"])
    available = available_memory_bytes() if available is None else available
    for what, (need, fields) in needs.items():
        if available is None or need <= available:
            continue
        name, value, _ = _largest_field(cfg, fields)
        where = "" if cfg.source in ("dict", Config().source) else f"{cfg.source}: "
        raise ConfigError(f"{where}{name} = {value:,}: {what} would need {need / 1e9:,.1f} GB (fp32), more than "
                          f"the {available / 1e9:,.1f} GB of memory available; fix: {_size_fix(cfg, fields)}")


# The stages that feed [verify] seq_len tokens through the whole model (embeddings + positional encoding).
WHOLE_MODEL_STAGES = ("full", "architecture")


def check_verify_lengths(cfg: Config, stages: list[str]) -> None:
    """ConfigError, before any check runs, when `stages` feed [verify] seq_len tokens through a positional
    encoding table shorter than that (model.max_len): a config to fix, not a paper claim that failed."""
    if cfg.verify.seq_len <= cfg.model.max_len or not set(stages) & set(WHOLE_MODEL_STAGES):
        return
    where = "" if cfg.source in ("dict", Config().source) else f"{cfg.source}: "
    raise ConfigError(f"{where}verify.seq_len = {cfg.verify.seq_len} is longer than model.max_len = "
                      f"{cfg.model.max_len}, the positional encoding's length (section 3.5), which the "
                      f"{' and '.join(s for s in WHOLE_MODEL_STAGES if s in stages)} stage(s) feed the whole "
                      f"sequence through; fix: raise model.max_len (max_seq_length) to at least "
                      f"{cfg.verify.seq_len}, or shorten verify.seq_len")


def estimate_batch_bytes(cfg: Config) -> int:
    """A lower bound (fp32) of one training batch's activations: per target token the logits and, per
    layer, the sub-layers' outputs kept for the backward pass; the source side as much again."""
    m, tokens = cfg.model, cfg.train.batch_tokens
    per_token = cfg.vocab.tgt_size + m.num_layers * (4 * m.d_model + m.d_ff)
    return 4 * tokens * (per_token + m.num_layers * (2 * m.d_model + m.d_ff))


def check_batch_memory(cfg: Config, available: int | None = None) -> None:
    """ConfigError naming train.batch_tokens and the GB when one batch's activations cannot fit in memory."""
    need = estimate_batch_bytes(cfg)
    available = available_memory_bytes() if available is None else available
    if available is not None and need > available:
        where = "" if cfg.source in ("dict", Config().source) else f"{cfg.source}: "
        raise ConfigError(f"{where}train.batch_tokens = {cfg.train.batch_tokens:,}: one batch's activations would "
                          f"need at least {need / 1e9:,.1f} GB (fp32), more than the {available / 1e9:,.1f} GB of "
                          "memory available; fix: lower train.batch_tokens (the paper's is 25,000; use "
                          "train.accum_steps to keep the effective batch)")


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
