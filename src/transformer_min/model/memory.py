"""What a config's model and `tmin verify` stages need in memory, in closed form, checked before anything
is allocated: a model too big for the machine is refused with the figure (GB) and the field to lower."""

from __future__ import annotations

import os

from transformer_min.core.config import Config, ModelConfig, VocabConfig, origin_of
from transformer_min.core.errors import ConfigError
from transformer_min.model.attention import MultiHeadAttention
from transformer_min.model.variants import variant
from transformer_min.core.i18n import tr


def count_model_values(m: ModelConfig, v: VocabConfig) -> int:
    """Parameters plus buffers that `build_model` allocates, in closed form (no torch).

    Section 3.2.2: each attention has W^Q, W^K (d_model x h d_k), W^V (d_model x h d_v), W^O (h d_v x d_model),
    plus what the self-attention class of model.positional adds (`count_values`, e.g. Shaw et al.'s tables);
    3.3: the FFN has d_model x d_ff twice; 3.1: two LayerNorms per encoder layer, three per decoder layer;
    3.4: embeddings V x d_model (shared per `weight_tying`); 3.5: the absolute encoding of each stack
    (a (max_len x d_model) buffer when sinusoidal, parameters when learned, nothing for rope/relative).
    """
    d, f = m.d_model, m.d_ff
    parts = variant(m.positional)
    self_attention = parts.self_attention.count_values(m)
    cross_attention = MultiHeadAttention.count_values(m)
    ffn = 2 * d * f + (f + d if m.bias else 0)
    encoder_layer = self_attention + ffn + 2 * 2 * d
    decoder_layer = self_attention + cross_attention + ffn + 3 * 2 * d
    final_norms = 2 * 2 * d if m.use_final_norm else 0
    embeddings = v.src_size * d + (0 if m.weight_tying == "three_way" else v.tgt_size * d)
    generator = v.tgt_size * d if m.weight_tying == "none" else 0
    positions = 2 * parts.encoding.count_values(m.max_len, d)
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


def field_value(cfg: Config, name: str) -> int:
    section, key = name.split(".")
    return getattr(getattr(cfg, section), {"d_k": "head_dim_k", "d_v": "head_dim_v"}.get(key, key))


def largest_field(cfg: Config, fields: tuple[str, ...]) -> tuple[str, int, int]:
    """(name, value, built-in default) of the field furthest above its default."""
    base = Config()
    name = max(fields, key=lambda n: field_value(cfg, n) / field_value(base, n))
    return name, field_value(cfg, name), field_value(base, name)


def variant_fields(cfg: Config) -> tuple[str, ...]:
    """The config fields the self-attention class of model.positional takes (the relative variant's tables
    grow with model.relative_clip): each size check names them too."""
    return tuple(f"model.{name}" for name in variant(cfg.model.positional).self_attention.config_fields)


def model_size_fields(cfg: Config) -> tuple[str, ...]:
    return MODEL_SIZE_FIELDS + variant_fields(cfg)


def size_fix(cfg: Config, fields: tuple[str, ...] | None = None) -> str:
    name, value, default = largest_field(cfg, fields or model_size_fields(cfg))
    return tr("lower {name} (now {value:,}; the built-in paper default is {default:,})").format(
        name=name, value=value, default=default)


def estimate_stage_bytes(cfg: Config) -> dict[str, int]:
    """Lower bounds (fp32) of the largest tensors `tmin verify` makes beside the model: the [attention] demo's
    input (B, L, D), weights (B, h, L, L) and projections (4 d_model x h d_k), and the stages' activations at
    [verify] sizes: (B, L, max(d_model, d_ff, vocab)) and the attention weights (B, h, L, L)."""
    a, v, m = cfg.attention, cfg.verify, cfg.model
    demo = (a.batch_size * a.seq_len * a.d_model + a.batch_size * a.num_heads * a.seq_len ** 2
            + 4 * a.d_model * a.num_heads * max(a.head_dim_k, a.head_dim_v))
    stages = (v.batch_size * v.seq_len * max(m.d_model, m.d_ff, cfg.vocab.tgt_size + relative_table_width(m))
              + v.batch_size * m.num_heads * v.seq_len ** 2)
    return {"attention": 4 * demo, "verify": 4 * stages}


def check_model_memory(cfg: Config, available: int | None = None, stages: bool = False) -> None:
    """ConfigError naming the figure (GB) and the field when the parameters and buffers of `cfg`'s model
    (and, with `stages`, the tensors `tmin verify` makes at [attention] and [verify] sizes) would not fit in
    the memory available (`available` bytes; default: what the machine has free now)."""
    needs = {tr("the model's parameters and buffers"): (estimate_model_bytes(cfg), model_size_fields(cfg))}
    if stages:
        sizes = estimate_stage_bytes(cfg)
        needs[tr("the [attention] demo's tensors")] = (sizes["attention"], STAGE_SIZE_FIELDS["attention"])
        needs[tr("the stages' tensors at [verify] sizes")] = (sizes["verify"],
                                                              STAGE_SIZE_FIELDS["verify"] + variant_fields(cfg))
    available = available_memory_bytes() if available is None else available
    for what, (need, fields) in needs.items():
        if available is None or need <= available:
            continue
        name, value, _ = largest_field(cfg, fields)
        where = origin_of(cfg, name)
        raise ConfigError(tr("{where}{name} = {value:,}: {what} would need {need:,.1f} GB (fp32), more than the {available:,.1f} GB of memory available; fix: {size_fix}").format(where=where, name=name, value=value, what=what, need=need / 1000000000.0, available=available / 1000000000.0, size_fix=size_fix(cfg, fields)))


def check_verify_lengths(cfg: Config, stages: list[str]) -> None:
    """ConfigError, before any check of any stage runs, when [verify] seq_len is longer than the positional
    encoding table (model.max_len, section 3.5): the one check every stage shares (positional, encoder, decoder,
    full, ...), a config to fix, not a paper claim that failed."""
    if cfg.verify.seq_len <= cfg.model.max_len or not stages:
        return
    where = origin_of(cfg, "verify.seq_len", "model.max_len")
    raise ConfigError(tr("{where}verify.seq_len = {seq_len} is longer than model.max_len = {max_len}, the length of "
                         "the positional encoding table (section 3.5), so no stage can feed that sequence through it; "
                         "fix: raise model.max_len (max_seq_length) to at least {seq_len}, or shorten verify.seq_len "
                         "to at most {max_len}").format(where=where, seq_len=cfg.verify.seq_len,
                                                        max_len=cfg.model.max_len))


def estimate_batch_bytes(cfg: Config) -> int:
    """A lower bound (fp32) of one training batch's activations: per target token the logits and, per
    layer, the sub-layers' outputs kept for the backward pass; the source side as much again."""
    m, tokens = cfg.model, cfg.train.batch_tokens
    per_token = cfg.vocab.tgt_size + m.num_layers * (4 * m.d_model + m.d_ff + relative_table_width(m))
    return 4 * tokens * (per_token + m.num_layers * (2 * m.d_model + m.d_ff + relative_table_width(m)))


def relative_table_width(m: ModelConfig) -> int:
    """Values per token of one self-attention layer's relative tables (model.positional = "relative", Shaw et
    al.): the scores against every one of the 2k + 1 vectors and the weights summed into them, (h, 2k + 1)
    each, kept for the backward pass; 0 for the other variants."""
    return m.num_heads * (2 * m.relative_clip + 1) if "relative_clip" in variant(m.positional).self_attention.config_fields else 0


# What one batch's activations grow with (`estimate_batch_bytes`); the one furthest above its default is named.
BATCH_SIZE_FIELDS = ("train.batch_tokens", "model.d_model", "model.d_ff", "model.num_layers", "vocab.tgt_size")


def batch_size_culprit(cfg: Config) -> tuple[str, str, int, str]:
    """(where, name, value, fix) of the field one batch's activations grow with furthest above its default
    (BATCH_SIZE_FIELDS and the variant's own, such as model.relative_clip), `where` the source of its value
    (`origin_of`); train.batch_tokens when none is above its default. What a batch too large for memory names,
    before training (`check_batch_memory`) and when training runs out of memory (`training.run`)."""
    name, value, default = largest_field(cfg, BATCH_SIZE_FIELDS + variant_fields(cfg))
    if value <= default:
        name, value, default = largest_field(cfg, BATCH_SIZE_FIELDS[:1])
    fix = (tr("lower train.batch_tokens (the paper's is 25,000; use train.accum_steps to keep the effective batch)")
           if name == "train.batch_tokens" else
           tr("lower {name} (now {value:,}; the built-in paper default is {default:,}), or train.batch_tokens"
              ).format(name=name, value=value, default=default))
    return origin_of(cfg, name), name, value, fix


def check_batch_memory(cfg: Config, available: int | None = None) -> None:
    """ConfigError naming the field that drives the size and the GB when the model (`check_model_memory`,
    first: its own fields such as model.relative_clip) or one batch's activations cannot fit in memory."""
    available = available_memory_bytes() if available is None else available
    check_model_memory(cfg, available)
    need = estimate_batch_bytes(cfg)
    if available is not None and need > available:
        where, name, value, fix = batch_size_culprit(cfg)
        raise ConfigError(tr("{where}{name} = {value:,}: one batch's activations would need at least {need:,.1f} GB "
                             "(fp32), more than the {available:,.1f} GB of memory available; fix: {fix}").format(
            where=where, name=name, value=value, need=need / 1e9, available=available / 1e9, fix=fix))
