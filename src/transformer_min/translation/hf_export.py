"""`tmin export --hf DIR`: one of our checkpoints as a Hugging Face transformers MarianMT folder.

MarianMT is section 3's network as transformers ships it: post-norm layers, fixed sinusoidal positions,
embeddings x sqrt(d_model), one shared SentencePiece vocabulary, three-way tying, LayerNorm eps 1e-5. The
export is exact, not approximate: where the two differ, a fixed map turns one into the other.

- Positions. Section 3.5 interleaves sin and cos (dimension 2i sin, 2i + 1 cos); Marian's table holds the
  sines in the first half and the cosines in the second. The permutation `marian_order` of the model
  dimension (0, 2, 4, ..., 1, 3, 5, ...) turns our table into Marian's. Every tensor that meets the residual
  stream is permuted the same way (`permute_residual`): embedding columns, the input columns of W^Q, W^K,
  W^V and W_1, the output rows and biases of W^O and W_2, each LayerNorm's weight and bias. Linear maps and
  LayerNorm commute with a permutation, so the network computes the same logits.
- Tokens. The decoder starts with our BOS (Marian's usual start is its pad id: decoder_start_token_id says
  which); PAD 0, EOS 2; forced_eos_token_id is off (our search does not force EOS at the length limit).
- Biases: a model without biases (model.bias = false) gets zero biases; final_logits_bias is zero.
- Tokenizer. Ours is one sentencepiece model whose ids are the model's ids. MarianTokenizer reads
  source.spm and target.spm (both our spm.model), and maps pieces to ids with vocab.json (our pieces in id
  order, padded to the vocabulary size as `vocabulary` pads them), so its ids are exactly ours.
What Marian cannot express is refused by name (`unsupported_hf`), with the alternative.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
from pathlib import Path

import torch

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.special_tokens import UNK_ID
from transformer_min.core.io import check_replaceable, holds_only
from transformer_min.translation.ct2_export import SPM_FILE, export_files, run_vocabulary, vocabulary, write_export

MARIAN_EPS = 1e-5  # nn.LayerNorm's default, which MarianMT's layers use
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
READS = ("w_q.weight", "w_k.weight", "w_v.weight", "w_1.weight")  # (out, D): the residual stream is their input
WRITES = ("w_o", "w_2")  # (D, in) and (D,): they write into the residual stream


def require_transformers():
    """The transformers module, or a ConfigError saying how to install it (it is the optional extra .[hf])."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(tr("transformers is not installed; fix: pip install -c constraints.txt -e '.[hf]'")) from None
    return transformers


def unsupported_hf(cfg: Config) -> list[str]:
    """What in `cfg` a MarianMT model cannot express, each naming the setting (empty: exportable)."""
    m = cfg.model
    out = []
    if m.norm == "pre":
        out.append(tr('model.norm = "pre" (MarianMT\'s layers are post-norm)'))
    if m.positional != "sinusoidal":
        out.append(tr('model.positional = "{positional}" (MarianMT adds its fixed sinusoidal table only; it is '
                      'computed when the model loads, so learned positions cannot be carried)').format(
            positional=m.positional))
    if m.use_final_norm and m.norm == "post":  # pre-norm's own final LayerNorm is named with pre-norm
        out.append(tr("model.final_norm = true (MarianMT has no final LayerNorm)"))
    if m.head_dim_k * m.num_heads != m.d_model or m.head_dim_v * m.num_heads != m.d_model:
        out.append(tr("model.d_k {d_k}, model.d_v {d_v} with d_model / num_heads = {per_head} (MarianMT's heads are "
                      "d_model / num_heads wide)").format(d_k=m.head_dim_k, d_v=m.head_dim_v,
                                                          per_head=m.d_model / m.num_heads))
    if m.weight_tying != "three_way":
        out.append(tr('model.weight_tying = "{tying}" (the export writes one matrix for both embeddings and the '
                      'pre-softmax projection)').format(tying=m.weight_tying))
    if m.layer_norm_eps != MARIAN_EPS:
        out.append(tr("model.layer_norm_eps = {eps} (MarianMT's LayerNorm eps is 1e-05)").format(eps=m.layer_norm_eps))
    return out


def marian_order(d_model: int) -> torch.Tensor:
    """The permutation of the model dimension from section 3.5's interleaved layout to Marian's halves:
    Marian's dimension k is our dimension marian_order[k] (sines 0, 2, 4, ..., then cosines 1, 3, 5, ...)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_residual(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """Our state dict with the model dimension permuted by `order` (new dimension k = old dimension order[k])
    wherever a tensor meets the residual stream; every other tensor is returned as it is. The network then
    computes the same function on permuted activations (positions permuted alike)."""
    out = {}
    for key, t in state.items():
        module = key.rsplit(".", 2)[-2]  # "w_o" of "decoder.layers.0.self_attn.w_o.weight"
        if module in ("src_embed", "tgt_embed", "generator", "src_pos", "tgt_pos") or key.endswith(READS):
            out[key] = t[:, order]  # (rows, D): D is the residual stream
        elif module.startswith(("norm", "final_norm")) or (module in WRITES and key.endswith(".bias")):
            out[key] = t[order]
        elif module in WRITES:
            out[key] = t[order, :]
        else:
            out[key] = t
    return out


def _layer_names(stack: str, i: int, cross: bool) -> dict[str, str]:
    """Our module paths of one layer -> MarianMT's."""
    ours, theirs = f"{stack}.layers.{i}.", f"model.{stack}.layers.{i}."
    names = {"self_attn": "self_attn", "norm1": "self_attn_layer_norm", "feed_forward.w_1": "fc1",
             "feed_forward.w_2": "fc2", ("norm3" if cross else "norm2"): "final_layer_norm"}
    if cross:
        names.update({"cross_attn": "encoder_attn", "norm2": "encoder_attn_layer_norm"})
    full = {}
    for a, b in names.items():
        if a.endswith("attn"):
            for w, p in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj"), ("w_o", "out_proj")):
                full[f"{ours}{a}.{w}"] = f"{theirs}{b}.{p}"
        else:
            full[ours + a] = theirs + b
    return full


def marian_state(state: dict[str, torch.Tensor], cfg: Config) -> dict[str, torch.Tensor]:
    """MarianMTModel's state dict from ours (permuted into Marian's layout first); absent biases are zeros."""
    m = cfg.model
    ours = permute_residual(state, marian_order(m.d_model))
    emb = ours["src_embed.weight"].contiguous()
    out = {"model.shared.weight": emb, "model.encoder.embed_tokens.weight": emb,
           "model.decoder.embed_tokens.weight": emb, "lm_head.weight": emb,
           "final_logits_bias": torch.zeros(1, emb.shape[0])}
    for stack, cross in (("encoder", False), ("decoder", True)):
        for i in range(m.num_layers):
            for a, b in _layer_names(stack, i, cross).items():
                weight = ours[a + ".weight"]
                out[b + ".weight"] = weight.contiguous()
                out[b + ".bias"] = ours.get(a + ".bias", torch.zeros(weight.shape[0])).contiguous()
    return out


def marian_config(cfg: Config):
    """The MarianConfig of `cfg`'s model (ids: PAD 0, BOS 1 starts the decoder, EOS 2; no forced EOS)."""
    from transformers import MarianConfig

    m, v = cfg.model, cfg.vocab
    return MarianConfig(
        vocab_size=v.tgt_size, decoder_vocab_size=v.tgt_size, max_position_embeddings=m.max_len, d_model=m.d_model,
        encoder_layers=m.num_layers, decoder_layers=m.num_layers, encoder_ffn_dim=m.d_ff, decoder_ffn_dim=m.d_ff,
        encoder_attention_heads=m.num_heads, decoder_attention_heads=m.num_heads, activation_function="relu",
        dropout=m.dropout, attention_dropout=m.attention_dropout, activation_dropout=0.0, scale_embedding=True,
        pad_token_id=v.pad_id, bos_token_id=v.bos_id, eos_token_id=v.eos_id, decoder_start_token_id=v.bos_id,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True, tie_word_embeddings=True)


def generation_config(cfg: Config):
    """transformers' GenerationConfig nearest section 6.1's search: beam decode.beam_size, the run's length
    penalty, at most model.max_len positions (BOS included), the early-stopping bound at the maximum length
    ("never" is tensor2tensor's bound). The penalty's form still differs: docs/export.md."""
    from transformers import GenerationConfig

    v = cfg.vocab
    return GenerationConfig(num_beams=cfg.decode.beam_size, length_penalty=cfg.decode.length_penalty,
                            max_length=cfg.model.max_len, early_stopping="never", decoder_start_token_id=v.bos_id,
                            bos_token_id=v.bos_id, eos_token_id=v.eos_id, pad_token_id=v.pad_id,
                            forced_eos_token_id=None)


def marian_model(model, cfg: Config):
    """A MarianMTModel (eval mode) carrying `model`'s weights, in Marian's layout."""
    from transformers import MarianMTModel

    hf = MarianMTModel(marian_config(cfg))
    theirs = marian_state({k: v.detach().float().cpu() for k, v in model.state_dict().items()}, cfg)
    missing, unexpected = hf.load_state_dict(theirs, strict=False)
    left = [k for k in missing if "embed_positions" not in k]  # Marian computes its table: not in a state dict
    if left or unexpected:
        raise ConfigError(tr("tmin export --hf: the MarianMT model of this transformers version does not take our "
                             "weights (missing {missing}, unexpected {unexpected}); fix: install the tested version "
                             "(constraints.txt)").format(missing=left[:3], unexpected=unexpected[:3]))
    hf.generation_config = generation_config(cfg)
    return hf.eval()


class MarianFolder:
    """What `write_export` saves into its temporary folder: transformers' own writers (config.json,
    model.safetensors, generation_config.json; the tokenizer's files) for the model and our vocabulary."""

    def __init__(self, hf_model, spm: Path, pieces: list[str], cfg: Config):
        self.hf_model, self.spm, self.pieces, self.cfg = hf_model, spm, pieces, cfg

    def save(self, folder: str) -> None:
        from transformers import MarianTokenizer

        self.hf_model.save_pretrained(folder)
        v, d = self.cfg.vocab, self.cfg.data
        with tempfile.TemporaryDirectory() as stage:
            stage = Path(stage)
            for name in TOKENIZER_FILES[:2]:
                shutil.copyfile(self.spm, stage / name)
            (stage / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(self.pieces)}, ensure_ascii=False))
            tok = MarianTokenizer(str(stage / "source.spm"), str(stage / "target.spm"), str(stage / "vocab.json"),
                                  source_lang=d.src_lang, target_lang=d.tgt_lang, unk_token=self.pieces[UNK_ID],
                                  eos_token=self.pieces[v.eos_id], pad_token=self.pieces[v.pad_id],
                                  model_max_length=self.cfg.model.max_len)
            tok.save_pretrained(folder)


def check_hf_out(out: Path, force: bool) -> None:
    """--hf DIR: a new or empty folder, or (with --force) an earlier export holding only its own files (and
    tmin eval's); a file, or a folder with anything else in it, is refused even with --force."""
    check_replaceable(out, "--hf", tr("an earlier tmin export holding only its own files"), holds_only(export_files),
                      folder=True)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(tr("--hf {out}: holds an earlier export; fix: choose a new folder, or pass --force to "
                             "replace that export").format(out=out))


def export_hf(checkpoint: str, out: str | Path, force: bool = False) -> Path:
    """Write the MarianMT folder of a translation checkpoint (a file or a run directory's newest) to `out`:
    transformers' files, our spm.model and tmin_config.json (the vocabulary's hash, the config, the file list).
    Written beside `out` and renamed into place; an earlier export is replaced only with `force`, a folder of
    anything else never (the same rules as --ctranslate2)."""
    require_transformers()
    from transformer_min.data.tokenizer import Tokenizer
    from transformer_min.model.saved import checkpoint_config, model_from_state, read_checkpoint

    out = Path(out)
    check_hf_out(out, force)
    state = read_checkpoint(checkpoint)
    state_path = Path(state["path"])
    cfg = checkpoint_config(state)
    spm = state_path.parent.parent / SPM_FILE
    if cfg.train.task != "translation" or not spm.exists():
        raise ConfigError(tr("{state_path}: not a translation checkpoint with its run's {SPM_FILE} (looked for {spm}); fix: export a checkpoint of tmin train on a translation config").format(state_path=state_path, SPM_FILE=SPM_FILE, spm=spm))
    problems = unsupported_hf(cfg)
    if problems:
        raise ConfigError(tr("tmin export --hf: {path} cannot be expressed as a MarianMT model: {problems}; fix: "
                             "tmin export --ctranslate2 (it maps pre-norm, rope, relative and learned positions, "
                             "untied weights and other head sizes), or train with the paper's settings").format(
            path=state_path, problems="; ".join(problems)))
    vocab_id = run_vocabulary(state, spm)
    pieces = vocabulary(Tokenizer(spm).sp, cfg.vocab.tgt_size)
    folder = MarianFolder(marian_model(model_from_state(state), cfg), spm, pieces, cfg)
    write_export(folder, out, spm, {"checkpoint": str(state_path), "format": "hf-marian",
                                    "transformers": importlib.metadata.version("transformers"), "vocab": vocab_id,
                                    "config": state["config"]})
    return out
