"""Encoder and decoder stacks and the full Transformer, section 3.1 (Figure 1); `build_model`."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError, ModelInputError
from transformer_min.core.hardware import attention_kernel, resolve_precision
from transformer_min.model.build import decoder_layer, encoder_layer
from transformer_min.model.embeddings import TokenEmbedding
from transformer_min.model.generator_loss import generator_loss
from transformer_min.model.inference import InferenceWeights, Norm, Packed, layout_transposed
from transformer_min.model.low_precision import with_precision
from transformer_min.model.kv_cache import LayerCache, StepCache
from transformer_min.model.step_kv import BufferPool, StepKV, self_attention_caches, to_places
from transformer_min.model.beam_kv import BeamKV
from transformer_min.model.layers import DecoderLayer, EncoderLayer, debug_shape
from transformer_min.model.masks import padding_mask, target_mask
from transformer_min.model.memory import check_model_memory, estimate_model_bytes, size_fix
from transformer_min.model.variants import attention_options, variant
from transformer_min.core.i18n import tr


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
                 final_norm: bool = False, pad_id: int = 0, kernel: str = "fused",
                 attention_options: dict[str, Any] | None = None):
        """`positional` picks the absolute encoding and the self-attention class from model/variants.py
        (`attention_options`: that class's extra arguments, e.g. relative_clip); `kernel` is every
        attention's fast path ("fused" or "matmul", see MultiHeadAttention)."""
        super().__init__()
        if weight_tying == "three_way" and src_vocab != tgt_vocab:
            raise ModelInputError(tr("three-way weight tying needs src_vocab == tgt_vocab (section 3.4)"))
        self.pad_id = pad_id
        self.d_model = d_model
        self.positional = positional
        self.src_embed = TokenEmbedding(src_vocab, d_model)
        self.tgt_embed = self.src_embed if weight_tying == "three_way" else TokenEmbedding(tgt_vocab, d_model)
        parts = variant(positional)
        self.src_pos = parts.encoding(d_model, max_len, dropout)  # 5.4: dropout on embeddings + PE
        self.tgt_pos = parts.encoding(d_model, max_len, dropout)
        layer_args = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                          attention_dropout=attention_dropout, d_k=d_k, d_v=d_v, norm_first=norm_first,
                          layer_norm_eps=layer_norm_eps, bias=bias, kernel=kernel,
                          self_attention=parts.self_attention, options=attention_options)
        norm = (lambda: nn.LayerNorm(d_model, eps=layer_norm_eps)) if final_norm else (lambda: None)
        self.encoder = Encoder([encoder_layer(**layer_args) for _ in range(num_layers)], norm())
        self.decoder = Decoder([decoder_layer(**layer_args) for _ in range(num_layers)], norm())
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
                tr("{name} token id {bad} is outside the vocabulary [0, {vocab_size}); check vocab.src_size / vocab.tgt_size against your tokenizer").format(name=name, bad=bad, vocab_size=embed.vocab_size)
            )

    def encode(self, src: Tensor, src_mask: Tensor | None = None, need_weights: bool = False,
               encoder: nn.Module | None = None) -> tuple[Tensor, list[Tensor]]:
        """src (B, S) -> memory (B, S, D), encoder self-attention weights; `encoder`: a stack to run instead of
        self.encoder (InferenceWeights.encoder, int8 decoding's copy)."""
        self._check_tokens(src, self.src_embed, "source")
        x = self.src_pos(self.src_embed(src))  # (B, S, D)
        debug_shape("encoder.embed+pe", x)
        return (self.encoder if encoder is None else encoder)(x, src_mask, need_weights)

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

    def inference_weights(self, layout: str | None = None, precision: str = "fp32") -> InferenceWeights:
        """A copy of the decoder's and the generator's current weights as `decode_step` uses them, in `layout`
        ("transposed" or "linear"; None: the one measured faster on this machine), their products in
        `precision` ("fp32", "bf16" or "int8": model/low_precision.py). Made by whoever decodes, once per
        decoding (model/inference.py): a later change of the parameters needs a new one."""
        transposed = layout_transposed(layout)
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: usable in and outside inference mode
            layers = tuple(layer.step_weights(transposed) for layer in self.decoder.layers)
            gen = Packed(transposed, self.generator) if isinstance(self.generator, nn.Linear) else None
            final = None if self.decoder.final_norm is None else Norm(self.decoder.final_norm)
        return with_precision(InferenceWeights(layers, gen, transposed, final), precision, self.encoder)

    def start_steps(self, memory: Tensor, pool: BufferPool | None = None) -> list[StepCache]:
        """Each decoder layer's state before the first `decode_step` (memory (N, S, D) projected once); the
        layers' self-attention keys and values in one buffer where d_k = d_v, taken from `pool` (model/step_kv.py:
        reorder them with `reorder_self_attention`, give the buffer back with `release_self_attention`)."""
        layers = self.decoder.layers
        shared = all(layer.self_attn.d_k == layer.self_attn.d_v for layer in layers)
        # beam slots where every layer's eq. (1) is the paper's (rope only rotates Q and K before it)
        slots = all(layer.self_attn.paper_attention for layer in layers)
        caches = self_attention_caches(len(layers), shared, pool, BeamKV if slots else StepKV)
        return [layer.start_step(memory, kv) for layer, kv in zip(layers, caches)]

    def decode_step(self, token: Tensor, t: int, caches: list[StepCache], w: InferenceWeights,
                    src_mask: Tensor | None, rows: Tensor | None = None) -> Tensor:
        """`decode` + the generator for one new token per row at inference: token (N,) at position t
        -> logits (N, V). Embedding x sqrt(d_model) (3.4) + PE (3.5), each layer's `step`, the generator.
        `rows` (N,): the caches' row of each row of token and logits (None: the same row; decoding/lean.py)."""
        if rows is not None:
            token = to_places(token, rows)  # (N,) in the caches' order
        x = F.embedding(token, self.tgt_embed.weight) * math.sqrt(self.d_model)  # (N, D)
        pe = self.tgt_pos.positions(1, t)  # (1, D); a 0-d zero for rope/relative
        x = x + (pe if pe.dtype == x.dtype else pe.to(x.dtype))
        for layer, cache, lw in zip(self.decoder.layers, caches, w.layers):
            x = layer.step(x, t, cache, lw, src_mask)
        if rows is not None:
            x = x.index_select(0, rows)  # (N, D) back in token's order
        if w.final_norm is not None:
            x = w.final_norm(x)
        return self.generator(x) if w.generator is None else w.generator(x)  # (N, V)

    @property
    def fused_loss(self) -> bool:
        """Whether forward(..., targets=) can take the fused generator + loss path (a linear generator)."""
        return isinstance(self.generator, nn.Linear)

    def forward(self, src: Tensor, tgt: Tensor, return_attention: bool = False, *,
                targets: Tensor | None = None, label_smoothing: float = 0.0):
        """src (B, S), tgt (B, T) (the output shifted right) -> logits (B, T, V_tgt).

        With return_attention=True, returns (logits, Attention) with every layer's weights.
        With targets (B, T) (the output itself), returns instead the label-smoothed loss of section 5.4 as
        `training.loss.label_smoothed_nll` gives it, (loss_sum, nll_sum, n_tokens), with the generator and
        the loss in one pass that never forms the logits (model/generator_loss.py; the training fast path,
        train.loss_kernel = "fused"). It is taken inside forward so that DistributedDataParallel sees it.
        """
        src_mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        memory, enc_w = self.encode(src, src_mask, return_attention)
        hidden, self_w, cross_w = self.decode(tgt, memory, src_mask, target_mask(tgt, self.pad_id),
                                              return_attention)
        if targets is not None:
            if return_attention or not self.fused_loss:
                raise ValueError("forward(targets=...) needs a linear generator and no return_attention")
            return generator_loss(hidden, self.generator.weight, self.generator.bias, targets, label_smoothing,
                                  self.pad_id)
        logits = self.generator(hidden)  # (B, T, V)
        debug_shape("generator.logits", logits)
        if return_attention:
            return logits, Attention(enc_w, self_w, cross_w)
        return logits


def resolve_kernel(cfg: Config, device: torch.device | str | None = None) -> str:
    """The attention fast path for the run `cfg` describes: core.hardware.attention_kernel for the device
    (train.device; `device` overrides it) and the precision train.precision resolves to there."""
    if device is None:
        device = "cuda" if cfg.train.device != "cpu" and torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "meta":
        return "fused"
    used = resolve_precision(cfg.train.precision, device).used
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(used, torch.float32)
    return attention_kernel(device.type, dtype)


def build_model(cfg: Config, kernel: str | None = None) -> Transformer:
    """The factory: the only place where config becomes modules.

    model.positional picks the absolute encoding and the self-attention class (model/variants.py); the
    attention fast path is decided here, once (`resolve_kernel`; pass `kernel` to override).
    Refuses, before allocating anything, a model whose parameters and buffers would not fit in memory
    (`check_model_memory`); on the meta device (parameter counting) nothing is allocated, so nothing is checked.
    """
    on_meta = torch.empty(()).device.type == "meta"
    if not on_meta:
        check_model_memory(cfg)
    m = cfg.model
    kernel = kernel or resolve_kernel(cfg, "meta" if on_meta else None)
    try:
        return Transformer(
            src_vocab=cfg.vocab.src_size, tgt_vocab=cfg.vocab.tgt_size, d_model=m.d_model,
            num_heads=m.num_heads, d_ff=m.d_ff, num_layers=m.num_layers, dropout=m.dropout,
            attention_dropout=m.attention_dropout, d_k=m.d_k, d_v=m.d_v, max_len=m.max_len,
            positional=m.positional, norm_first=m.norm == "pre", weight_tying=m.weight_tying,
            layer_norm_eps=m.layer_norm_eps, bias=m.bias, final_norm=m.use_final_norm,
            pad_id=cfg.vocab.pad_id, kernel=kernel, attention_options=attention_options(m),
        )
    except (MemoryError, RuntimeError) as e:  # the estimate fitted, the allocation did not
        if not isinstance(e, MemoryError) and "alloc" not in str(e).lower() and "memory" not in str(e).lower():
            raise
        raise ConfigError(tr("not enough memory to build the model ({estimate_model_bytes:,.2f} GB of parameters and buffers in fp32); fix: {size_fix}").format(estimate_model_bytes=estimate_model_bytes(cfg) / 1000000000.0, size_fix=size_fix(cfg))) from None


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
