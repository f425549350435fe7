"""`tmin export --ctranslate2`: one of our checkpoints as a CTranslate2 model directory.

CTranslate2 (the optional extra `.[export]`) runs Transformer NMT on the CPU with its own kernels. Its
`TransformerSpec` describes the same network as section 3: we fill it from our weights, tensor for tensor.

What is mapped, and how:
- post-norm (section 3.1, LayerNorm(x + Sublayer(x))) or pre-norm with its final LayerNorm;
- the embeddings scaled by sqrt(d_model) (section 3.4), three-way tying (one matrix for the source and
  target embeddings and the pre-softmax projection);
- positions: our own table is written for sinusoidal (interleaved sin/cos, section 3.5; CTranslate2's
  built-in one is the concatenated form) and learned; rope as CTranslate2's interleaved rotary embedding
  on every head dimension, base 10000; relative as Shaw et al.'s key and value tables;
- W^Q, W^K, W^V of self-attention fused into one matrix, W^K, W^V of encoder-decoder attention into another;
- the special symbols and the sentencepiece vocabulary of the run (ids are pieces, in id order).
A configuration CTranslate2 cannot express is refused by name (`unsupported`).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.core.io import check_replaceable, holds_only
from transformer_min.core.special_tokens import UNK_ID
from transformer_min.translation.testset import is_eval_output
from transformer_min.core.i18n import tr

QUANTIZATIONS = ("int8", "int8_float32", "float16")
CONFIG_FILE = "tmin_config.json"  # our config beside CTranslate2's files: max_len, the track, languages
SPM_FILE = "spm.model"


def require_ctranslate2():
    """The ctranslate2 module, or a ConfigError saying how to install it (it is an optional extra)."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError(tr("ctranslate2 is not installed; fix: pip install -e '.[export]' (or pip install ctranslate2)")) from None
    return ctranslate2


def unsupported(cfg: Config) -> list[str]:
    """What in `cfg` the exporter cannot express in a CTranslate2 TransformerSpec (empty: exportable)."""
    m = cfg.model
    out = []
    if m.norm == "post" and m.use_final_norm:
        out.append(tr("model.final_norm = true with model.norm = \"post\" (CTranslate2's post-norm stacks have no "
                      "final LayerNorm)"))
    if m.head_dim_k != m.head_dim_v:
        out.append(tr("model.d_k {d_k} != model.d_v {d_v} (CTranslate2 has one head size)").format(
            d_k=m.head_dim_k, d_v=m.head_dim_v))
    return out


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, *linears: torch.nn.Linear) -> None:
    """Fill a LinearSpec with one nn.Linear, or several fused along the output axis (Q, K, V)."""
    spec.weight = _np(torch.cat([lin.weight for lin in linears], 0))  # (out, in), as torch stores it
    if linears[0].bias is not None:
        spec.bias = _np(torch.cat([lin.bias for lin in linears], 0))


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _attention(spec, attn, self_attention: bool) -> None:
    if self_attention:
        _linear(spec.linear[0], attn.w_q, attn.w_k, attn.w_v)
    else:
        _linear(spec.linear[0], attn.w_q)
        _linear(spec.linear[1], attn.w_k, attn.w_v)
    _linear(spec.linear[-1], attn.w_o)
    if hasattr(attn, "rel_k"):  # Shaw et al. (2018): 2k + 1 vectors each, CTranslate2 infers k from the size
        spec.relative_position_keys = _np(attn.rel_k)
        spec.relative_position_values = _np(attn.rel_v)


def _ffn(spec, ffn, norm: torch.nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, ffn.w_1)
    _linear(spec.linear_1, ffn.w_2)


def _positions(spec, pos, max_len: int, d_model: int) -> None:
    """Our absolute table, all max_len rows (position 0 is the first token: BOS in the decoder)."""
    if not hasattr(spec, "position_encodings"):
        return
    table = pos.positions(max_len, 0)
    if table.dim() < 2:  # rope/relative: nothing is added; CTranslate2's encoder still adds a table
        table = torch.zeros(max_len, d_model)
    spec.position_encodings.encodings = _np(table)


def build_spec(model, cfg: Config, vocab: list[str]):
    """A filled ctranslate2 TransformerSpec for `model` (built from `cfg`), with `vocab` as both vocabularies."""
    require_ctranslate2()
    from ctranslate2.specs import transformer_spec

    problems = unsupported(cfg)
    if problems:
        raise ConfigError(tr("tmin export --ctranslate2: this checkpoint's configuration cannot be expressed: ")
                          + "; ".join(problems))
    m = cfg.model
    pre = m.norm == "pre"
    kind = dict(pre_norm=pre, no_final_norm=not m.use_final_norm, relative_position=m.positional == "relative",
                rotary_dim=0 if m.positional == "rope" else None, rotary_interleave=True,
                head_dim=m.head_dim_k if m.head_dim_k * m.num_heads != m.d_model else None)
    encoder = transformer_spec.TransformerEncoderSpec(m.num_layers, m.num_heads, **kind)
    decoder = transformer_spec.TransformerDecoderSpec(m.num_layers, m.num_heads, **kind)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    encoder.embeddings[0].weight = _np(model.src_embed.weight)
    decoder.embeddings.weight = _np(model.tgt_embed.weight)
    encoder.scale_embeddings = decoder.scale_embeddings = True  # x sqrt(d_model), section 3.4
    _positions(encoder, model.src_pos, m.max_len, m.d_model)
    _positions(decoder, model.tgt_pos, m.max_len, m.d_model)
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _ffn(layer_spec.ffn, layer.feed_forward, layer.norm2)
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _attention(layer_spec.attention, layer.cross_attn, False)
        _norm(layer_spec.attention.layer_norm, layer.norm2)
        _ffn(layer_spec.ffn, layer.feed_forward, layer.norm3)
    if model.encoder.final_norm is not None:
        _norm(encoder.layer_norm, model.encoder.final_norm)
        _norm(decoder.layer_norm, model.decoder.final_norm)
    decoder.projection.weight = _np(model.generator.weight)  # tied: the same matrix as the embeddings

    v = cfg.vocab
    spec.config.layer_norm_epsilon = m.layer_norm_eps
    spec.config.bos_token = spec.config.decoder_start_token = vocab[v.bos_id]
    spec.config.eos_token = vocab[v.eos_id]
    spec.config.unk_token = vocab[UNK_ID]
    spec.register_source_vocabulary(vocab[: v.src_size])
    spec.register_target_vocabulary(vocab[: v.tgt_size])
    return spec


def vocabulary(sp, size: int) -> list[str]:
    """The pieces of a sentencepiece model in id order, padded with never-seen names up to the model's
    vocabulary size (sentencepiece may learn fewer pieces than data.vocab_size asks)."""
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    return pieces + [f"<tmin_unused_{i}>" for i in range(len(pieces), size)]


EXPORT_FILES = {"model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
                "target_vocabulary.json", SPM_FILE, CONFIG_FILE}  # what an export from before the manifest held


def export_files(folder: Path) -> set[str]:
    """The manifest of an earlier export in `folder`: the files its tmin_config.json lists (an export from
    before the list: EXPORT_FILES); empty when `folder` holds no export of ours."""
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(meta, dict) or "config" not in meta:
        return set()
    files = meta.get("files")
    ours = set(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else EXPORT_FILES
    return ours | {p.name for p in folder.iterdir() if p.is_file() and is_eval_output(p)}  # tmin eval's, beside it


def check_export_out(out: Path, force: bool) -> None:
    """--out: a new or empty folder, or (with --force) an earlier export holding only the files it wrote;
    a file, or a folder with anything else in it, is refused even with --force (it is not ours to delete)."""
    check_replaceable(out, "--out", tr("an earlier tmin export holding only its own files"), holds_only(export_files),
                      folder=True)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(tr("--out {out}: holds an earlier export; fix: choose a new folder, or pass --force to "
                             "replace that export").format(out=out))


def run_vocabulary(state: dict, spm: Path) -> str:
    """The hash of the run's spm.model, checked against the one the checkpoint recorded."""
    from transformer_min.data.tokenizer import check_same_vocabulary, vocab_hash

    actual = vocab_hash(spm)
    check_same_vocabulary(((state.get("extra") or {}).get("vocab") or "", f"the checkpoint {state['path']}"),
                          (actual, str(spm)), "put back the run's own spm.model, or train again")
    return actual


def write_export(spec, out: Path, spm: Path, meta: dict) -> None:
    """Save the spec, spm.model and tmin_config.json (with the manifest) into a temporary folder beside `out`,
    then rename it into place (an earlier export is moved aside first and removed last)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users
        spec.save(str(tmp))
        shutil.copyfile(spm, tmp / SPM_FILE)
        files = sorted({p.name for p in tmp.iterdir()} | {CONFIG_FILE})
        (tmp / CONFIG_FILE).write_text(json.dumps({**meta, "files": files}, indent=2))
        if out.exists():
            for p in out.iterdir():  # what else is there is tmin eval's (check_export_out): it stays
                if p.name not in files:
                    p.rename(tmp / p.name)
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            old.rmdir()
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)  # only our files: check_export_out saw to that
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_ctranslate2(checkpoint: str, out: str | Path, quantization: str | None = None,
                       force: bool = False) -> Path:
    """Write the CTranslate2 model of a translation checkpoint (a file or a run directory's newest) to `out`:
    model.bin, the vocabularies, config.json, and ours beside them (spm.model, tmin_config.json with the
    vocabulary's hash and the list of files). The directory is written next to `out` and renamed into place,
    so an existing export is never half replaced; an existing export is replaced only with `force`, and a
    folder of anything else never."""
    ctranslate2 = require_ctranslate2()
    from transformer_min.data.tokenizer import Tokenizer
    from transformer_min.model.saved import checkpoint_config, model_from_state, read_checkpoint

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(tr("--quantization {quantization!r}: expected one of {items}").format(quantization=quantization, items=', '.join(QUANTIZATIONS)))
    out = Path(out)
    check_export_out(out, force)
    state = read_checkpoint(checkpoint)  # read once: the weights and the config both come from it
    state_path = Path(state["path"])
    cfg = checkpoint_config(state)
    spm = state_path.parent.parent / SPM_FILE
    if cfg.train.task != "translation" or not spm.exists():
        raise ConfigError(tr("{state_path}: not a translation checkpoint with its run's {SPM_FILE} (looked for {spm}); fix: export a checkpoint of tmin train on a translation config").format(state_path=state_path, SPM_FILE=SPM_FILE, spm=spm))
    vocab_id = run_vocabulary(state, spm)
    vocab = vocabulary(Tokenizer(spm).sp, max(cfg.vocab.src_size, cfg.vocab.tgt_size))
    spec = build_spec(model_from_state(state), cfg, vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    write_export(spec, out, spm, {"checkpoint": str(state_path), "quantization": quantization or "float32",
                                  "ctranslate2": importlib.metadata.version("ctranslate2"), "vocab": vocab_id,
                                  "config": state["config"]})
    return out
