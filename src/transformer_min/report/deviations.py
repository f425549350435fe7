"""Where the code departs from the paper or fills a gap it leaves: the one source of truth.

`tmin report` renders this list, and docs/deviations.md is generated from it:

    python -m transformer_min.report.deviations > docs/deviations.md

(tests/report/test_deviations.py fails when the two disagree).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Deviation:
    kind: str  # "gap": the paper does not say; "departure": opt-in, differs from the paper
    topic: str
    paper: str
    ours: str
    switch: str  # the config key that controls it ("-" if none)
    default: str


DEVIATIONS: list[Deviation] = [
    Deviation("gap", "LayerNorm epsilon", "not given", "1e-5 (PyTorch's default)",
              "model.layer_norm_eps", "1e-5"),
    Deviation("gap", "initialisation", "not given",
              "Xavier-uniform linear weights, zero biases; embeddings N(0, d_model^-0.5)", "-", "-"),
    Deviation("gap", "biases in the projections", "not stated (the released code has them)",
              "biases in W^Q, W^K, W^V, W^O and both FFN layers; none on the tied output layer",
              "model.bias", "true"),
    Deviation("gap", "attention dropout", "not in the paper (5.4 has residual and embedding dropout only)",
              "dropout on the attention weights, off by default", "model.attention_dropout", "0.0"),
    Deviation("gap", "ReLU dropout", "not in the paper", "none (the FFN has a dropout argument, unused by "
              "build_model)", "-", "-"),
    Deviation("gap", "label-smoothing distribution", "eps_ls = 0.1, distribution not given",
              "q = (1 - eps) onehot(y) + eps/(V-1) on every non-pad class, 0 on pad; pad targets ignored",
              "train.label_smoothing", "0.1"),
    Deviation("gap", "fully masked attention rows", "not discussed (a -inf fill gives NaN)",
              "weights and output 0 for a query with no allowed key; fill value finfo(dtype).min",
              "-", "-"),
    Deviation("gap", "vocabulary size", "about 37000 (EN-DE BPE)", "config value; Table 3 counts use 37000 "
              "and 40960", "vocab.src_size, vocab.tgt_size", "37000"),
    Deviation("gap", "beam search length limit and stop", "input length + 50 (6.1), \"terminate early when "
              "possible\"; tensor2tensor: the batch's padded input length + 50, and the batch stops when every "
              "sentence's bound (no alive hypothesis can beat the worst finished one) holds",
              "each sentence's own input length + 50, and each sentence stops on its own bound, so a sentence "
              "decodes the same in any batch; the bound is on the best finished hypothesis, the only one "
              "returned: tensor2tensor's output, without the steps that only improve finished hypotheses never "
              "returned (issue 37)", "decode.max_len_offset", "50"),
    Deviation("departure", "pre-norm", "post-norm LayerNorm(x + Sublayer(x)), no final LayerNorm",
              "x + Sublayer(LayerNorm(x)), plus a final LayerNorm on each stack", "model.norm, model.final_norm",
              "\"post\", unset (final norm only with pre-norm)"),
    Deviation("departure", "learned positions", "sinusoids (learned: Table 3 row E)",
              "a learned max_len x d_model table per stack", "model.positional", "\"sinusoidal\""),
    Deviation("departure", "weight tying off", "three-way tying (3.4)",
              "tie only the decoder embedding and output layer, or nothing", "model.weight_tying",
              "\"three_way\""),
    Deviation("departure", "learning-rate factor", "eq. (3) as printed (factor 1)",
              "eq. (3) multiplied by a constant", "train.lr_factor", "1.0"),
    Deviation("departure", "gradient clipping", "none mentioned", "clip the gradient norm", "train.clip",
              "0.0 (off)"),
    Deviation("departure", "weight decay", "none mentioned", "Adam weight decay", "train.weight_decay", "0.0 (off)"),
    Deviation("departure", "beam slots for finished hypotheses", "tensor2tensor's beam search (6.1: beam 4, "
              "alpha 0.6): K alive and up to K finished hypotheses kept apart; stop at the maximum length or when "
              "the best alive one, at the largest length penalty, cannot beat the worst finished one",
              "search = \"slots\": finished hypotheses stay in the K slots, ranked against live ones by "
              "log P / lp, so each that ends narrows the live beam; one cut at the maximum length counts as "
              "finished; stops when every slot has finished. Same BLEU at alpha 0.6; higher on val at alpha 1.4 and "
              "above, where t2t finds over-long hypotheses (docs/results.md)", "decode.search", "\"t2t\""),
    Deviation("departure", "CTranslate2 engine", "tensor2tensor's beam search with the GNMT penalty "
              "((5 + |Y|) / 6)^alpha (6.1)", "--engine ctranslate2 (a tmin export): CTranslate2's own beam search, which "
              "ranks by log P / |Y|^alpha while it searches; its `beam` best are re-ranked by the paper's penalty. "
              "Greedy output is identical to ours, beam output equal on most sentences (docs/results.md)",
              "-", "- (a command-line choice: --engine torch)"),
    Deviation("departure", "mixed precision", "fp32 training (P100)",
              "bf16 autocast, or fp16 autocast with a GradScaler; \"auto\" picks bf16 where the hardware has native bf16 (CUDA 8.0+, AVX512_BF16 or AMX), else fp32",
              "train.precision", "\"auto\" (fp32 without native bf16)"),
    Deviation("departure", "decoding precision", "fp32 decoding",
              "int8 (per-row dynamic quantization of the decoder step's linear maps and the generator, and of the "
              "encoder's FFN where measured faster, activations per token) or bf16 products with fp32 results; "
              "\"auto\" picks bf16 where the CPU has native bf16 (AVX512_BF16 or AMX), else fp32; the encoder's "
              "attention, LayerNorm, softmax, caches and the search stay fp32",
              "decode.precision", "\"fp32\" (--precision on translate and eval)"),
    Deviation("departure", "rotary positions (RoPE)", "sinusoids added to the embeddings (3.5)",
              "positional = \"rope\": no absolute encoding; Q and K of encoder and decoder self-attention "
              "rotated pairwise by pos * 10000^(-2i/d_k) (Su et al., 2021); encoder-decoder attention plain",
              "model.positional", "\"sinusoidal\""),
    Deviation("departure", "relative positions (Shaw et al.)", "sinusoids added to the embeddings (3.5)",
              "positional = \"relative\": no absolute encoding; self-attention adds learned a^K_ij, "
              "a^V_ij = w_clip(j-i, k) to keys and "
              "values (Shaw et al., 2018, eq. (3)-(4)), 2k+1 vectors per layer shared across heads, initialised "
              "N(0, d^-1/2); encoder-decoder attention plain", "model.positional, model.relative_clip",
              "\"sinusoidal\"; k = 16"),
]

HEADERS = ["kind", "topic", "paper", "ours", "config switch", "default"]


def rows() -> list[list[str]]:
    return [[d.kind, d.topic, d.paper, d.ours, d.switch, d.default] for d in DEVIATIONS]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows()]
    return "\n".join(lines) + "\n"


def markdown_document() -> str:
    """The whole of docs/deviations.md."""
    return (
        "# Deviations from the paper\n\n"
        "<!-- Generated from src/transformer_min/report/deviations.py; do not edit by hand.\n"
        "     Regenerate: python -m transformer_min.report.deviations > docs/deviations.md -->\n\n"
        "Every place the code departs from \"Attention Is All You Need\" or fills a gap the paper leaves, "
        "with the config switch that controls it. A *gap* is a choice the paper does not make for us; a "
        "*departure* is opt-in and off by default, so the defaults are the paper's base model. `tmin report` "
        "prints the same table.\n\n"
        + markdown_table()
    )


def main() -> int:
    sys.stdout.write(markdown_document())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
