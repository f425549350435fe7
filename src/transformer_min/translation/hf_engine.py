"""Decoding with transformers (`--engine hf --model DIR`): a MarianMT folder, written by `tmin export --hf` or
any compatible one (an opus-mt model, for example), loaded offline and searched by `model.generate`.

Our export carries tmin_config.json (the run's config and the vocabulary's hash): its input is preprocessed
as the run's was, its ids are our sentencepiece ids (source.spm is our spm.model), and the hypotheses are
detokenised by our Tokenizer, exactly as `--engine torch` does. Another MarianMT folder is read as raw text
(data.track "raw") through its own MarianTokenizer, languages from its tokenizer config.

Each batch holds sources of one length, so `max_new_tokens` is section 6.1's per-sentence limit (input + 50,
within model.max_len) for every sentence of it. Greedy (beam 1) is our greedy search; a wider beam is
transformers' beam search with the run's alpha, whose penalty is log P / |Y|^alpha where ours is
log P / ((5 + |Y|) / 6)^alpha (docs/export.md measures how often the two agree).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr
from transformer_min.data.tokenizer import Tokenizer, check_same_vocabulary, vocab_hash
from transformer_min.translation.ct2_export import CONFIG_FILE, vocabulary
from transformer_min.translation.hf_export import require_transformers

WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # either one: ours write safetensors
EXPORT_FIX = "tmin export --hf {path} --checkpoint {checkpoint} --force"


def export_fix(path: Path, meta: dict | None = None) -> str:
    """The command that writes `path` again (the checkpoint its tmin_config.json names, else RUN)."""
    return EXPORT_FIX.format(path=path, checkpoint=(meta or {}).get("checkpoint") or "RUN")


class MarianText:
    """Another MarianMT folder's MarianTokenizer as our Tokenizer's interface (text <-> ids, `hash`)."""

    def __init__(self, tok, path: Path):
        self.tok, self.path, self.hash = tok, path / "source.spm", vocab_hash(path / "source.spm")

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tok(texts, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.tok.batch_decode(ids, skip_special_tokens=True)


@dataclass
class HFModel:
    """A loaded MarianMT folder: the model (eval mode, fp32), our config of it, its tokenizer and special ids."""

    model: object
    cfg: Config
    tokenizer: Tokenizer | MarianText
    path: Path
    start_id: int
    eos_id: int
    pad_id: int
    label: str = "hf"
    compute_type: str = "float32"

    def translate_ids(self, src_lists: list[list[int]], beam_size: int, alpha: float, max_len_offset: int,
                      batch_size: int = 100, skip: set[int] = frozenset()) -> list[list[int]]:
        """Like translation.translate.translate_ids: source ids (no EOS) -> output ids (no start, cut before EOS)."""
        from transformer_min.decoding.search import strip

        order = sorted((i for i in range(len(src_lists)) if i not in skip), key=lambda i: len(src_lists[i]))
        out: list[list[int]] = [[] for _ in src_lists]
        batches: list[list[int]] = []
        for i in order:  # one source length per batch: one length limit
            if batches and len(src_lists[batches[-1][0]]) == len(src_lists[i]) and len(batches[-1]) < batch_size:
                batches[-1].append(i)
            else:
                batches.append([i])
        for idx in batches:
            limit = min(len(src_lists[idx[0]]) + 1 + max_len_offset, self.cfg.model.max_len - 1)
            src = torch.tensor([src_lists[i] + [self.eos_id] for i in idx])
            with torch.inference_mode():
                hyp = self.model.generate(input_ids=src, attention_mask=torch.ones_like(src),
                                          **self.search(beam_size, alpha, limit))
            for i, h in zip(idx, strip(hyp[:, 1:], self.eos_id, self.pad_id)):
                out[i] = h
        return out

    def search(self, beam_size: int, alpha: float, limit: int) -> dict:
        """generate's arguments for this search, over the folder's generation config: `beam_size`, `alpha`, at
        most `limit` tokens after the start token (greedy: the beam-only settings at their defaults, which
        transformers would warn about). Arguments, not a GenerationConfig: transformers replaces the default
        values of a config it is given (num_beams 1, for one) with the folder's own."""
        beam = beam_size > 1
        return dict(num_beams=beam_size, num_return_sequences=1, do_sample=False, max_length=limit + 1,
                    max_new_tokens=None, length_penalty=alpha if beam else 1.0,
                    early_stopping=self.model.generation_config.early_stopping if beam else False)

    def logits(self, src: list[int], tgt: list[int]) -> torch.Tensor:
        """Teacher-forced logits (len(tgt) + 1, V) of `tgt` (no start, no EOS) given `src` (no EOS)."""
        with torch.inference_mode():
            return self.model(input_ids=torch.tensor([src + [self.eos_id]]),
                              decoder_input_ids=torch.tensor([[self.start_id] + tgt])).logits[0]


def _missing(path: Path) -> list[str]:
    need = ["config.json", "source.spm", "vocab.json"]
    missing = [f for f in need if not (path / f).is_file()]
    return missing + ([] if any((path / w).is_file() for w in WEIGHTS) else [WEIGHTS[0]])


def _our_config(path: Path) -> dict | None:
    """tmin_config.json of our export (None: another MarianMT folder); unreadable: a named error."""
    if not (path / CONFIG_FILE).is_file():
        return None
    try:
        meta = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        meta["config"]["model"]
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(tr("--model {path}: {CONFIG_FILE} is unreadable ({e}); fix: export the checkpoint again: "
                             "{fix}").format(path=path, CONFIG_FILE=CONFIG_FILE, e=e, fix=export_fix(path))) from None
    return meta


def _foreign_config(hf, tok) -> Config:
    """Our config describing another MarianMT model (raw text, its languages, its beam and penalty)."""
    from transformer_min.core.config import DataConfig, DecodeConfig, ModelConfig, VocabConfig

    c, g = hf.config, hf.generation_config
    d = DataConfig(track="raw", src_lang=tok.source_lang or "src", tgt_lang=tok.target_lang or "tgt")
    return Config(model=ModelConfig(d_model=c.d_model, num_heads=c.encoder_attention_heads,
                                    d_ff=c.encoder_ffn_dim, num_layers=c.encoder_layers, dropout=0.0,
                                    max_len=c.max_position_embeddings),
                  vocab=VocabConfig(src_size=c.vocab_size, tgt_size=c.decoder_vocab_size or c.vocab_size), data=d,
                  decode=DecodeConfig(beam_size=g.num_beams or 1, length_penalty=g.length_penalty or 0.0))


def _check_our_vocabulary(path: Path, meta: dict, tokenizer: Tokenizer, tok, cfg: Config) -> None:
    """The export's source.spm and vocab.json are the vocabulary it was exported with."""
    check_same_vocabulary((meta.get("vocab") or "", f"the export {path} (model.safetensors)"),
                          (tokenizer.hash, str(path / "source.spm")),
                          tr("put back the export's own tokenizer files, or export the checkpoint again: {fix}").format(
                              fix=export_fix(path, meta)))
    if tok.encoder != {p: i for i, p in enumerate(vocabulary(tokenizer.sp, cfg.vocab.tgt_size))}:
        raise ConfigError(tr("--model {path}: vocab.json does not list source.spm's pieces in id order, so "
                             "MarianTokenizer's ids would not be the model's; fix: export the checkpoint again: "
                             "{fix}").format(path=path, fix=export_fix(path, meta)))


def _load(path: Path):
    from transformers import MarianMTModel, MarianTokenizer

    try:
        hf = MarianMTModel.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
        tok = MarianTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - a cut safetensors file, bad JSON, a foreign format: all named below
        reason = " ".join(str(e).split())[:300]
        raise ConfigError(tr("--model {path}: transformers could not load it as a MarianMT model ({reason}); fix: "
                             "export the checkpoint again: {fix}").format(path=path, reason=reason,
                                                                         fix=export_fix(path))) from None
    return hf.eval(), tok


def check_hf_options(checkpoint: str | None, model_dir: str | None, search: str | None) -> None:
    """--engine hf needs --model (a MarianMT folder) and neither --checkpoint nor --search slots."""
    if not model_dir:
        raise ConfigError(tr("--model: required with --engine hf; fix: tmin export --hf DIR --checkpoint RUN, then "
                             "--model DIR (or give a MarianMT model's folder)"))
    if checkpoint:
        raise ConfigError(tr("--checkpoint and --engine hf exclude each other: the MarianMT folder (--model) is the "
                             "model"))
    if search == "slots":
        raise ConfigError(tr("--search slots: transformers runs its own beam search; fix: drop --search, or use "
                             "--engine torch"))


def load_hf_model(model_dir: str | Path, compute_type: str = "default") -> HFModel:
    """Open a MarianMT folder offline (no network: local files only) on the CPU, in fp32."""
    if compute_type not in ("default", "float32"):
        raise ConfigError(tr("--compute-type {compute_type}: --engine hf decodes in float32; fix: drop "
                             "--compute-type, or use --engine ctranslate2 for int8").format(compute_type=compute_type))
    require_transformers()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformer_min.core.config import config_from_dict

    path = Path(model_dir)
    missing = _missing(path) if path.is_dir() else ["config.json"]
    if missing:
        raise ConfigError(tr("--model {path}: not a MarianMT folder (missing {items}); fix: make one with "
                             "tmin export --hf DIR --checkpoint RUN, or give a MarianMT model's folder").format(
            path=path, items=", ".join(missing)))
    meta = _our_config(path)
    hf, tok = _load(path)
    if meta is None:
        cfg, tokenizer = _foreign_config(hf, tok), MarianText(tok, path)
    else:
        cfg = config_from_dict(meta["config"], source=f"export {path}")
        tokenizer = Tokenizer(path / "source.spm")
        _check_our_vocabulary(path, meta, tokenizer, tok, cfg)
    g, c = hf.generation_config, hf.config
    eos = g.eos_token_id if g.eos_token_id is not None else c.eos_token_id
    start = g.decoder_start_token_id if g.decoder_start_token_id is not None else c.decoder_start_token_id
    return HFModel(hf, cfg, tokenizer, path, start, eos if isinstance(eos, int) else eos[0], c.pad_token_id)
