"""`tmin data prepare`: the shared subword vocabulary (section 5.1), every split encoded, cached by checksum;
and the training pairs of train.task = "translation", batched by length."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_min.core.config import Config, DataConfig, origin_of
from transformer_min.data import text
from transformer_min.data.batching import TokenBatcher
from transformer_min.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer
from transformer_min.core.errors import ConfigError, DataError
from transformer_min.core.io import atomic_write, atomic_write_bytes, atomic_write_text
from transformer_min.core.i18n import tr

log = logging.getLogger(__name__)
CACHE_VERSION = 1


@dataclass
class Prepared:
    """Encoded splits {name: [(src ids, tgt ids)]}, raw target references, the tokenizer, stats."""

    cache_dir: Path
    tokenizer: Tokenizer
    splits: dict
    references: dict
    sources: dict
    stats: dict
    reused: bool

    @property
    def vocab(self) -> str:
        """The hash of the vocabulary the splits were encoded with (meta.json's; a cache from before the hash
        is read as its spm.model's)."""
        return self.stats.get("vocab") or self.tokenizer.hash


def cache_dir_for(cfg: Config) -> tuple[Path, list[Path]]:
    d = cfg.data
    where = origin_of(cfg, "data.data_dir")
    paths = [text.split_path(d, s, lang, where) for s in (d.train_split, d.valid_split, d.test_split)
             for lang in (d.src_lang, d.tgt_lang)]
    settings = json.dumps([CACHE_VERSION, d.track, d.vocab_size, d.tokenizer, d.max_len, d.src_lang,
                           d.tgt_lang, d.train_split, d.valid_split, d.test_split])
    return Path(cfg.train.out_dir) / "data" / text.checksum(paths, settings), paths


def _encode_split(tok: Tokenizer, pairs: list[tuple[str, str]], max_len: int, name: str, stats: dict):
    """Encode pairs; empty lines and pairs over max_len pieces are counted and skipped."""
    kept_idx, src_txt, tgt_txt = [], [], []
    empty = 0
    for i, (s, t) in enumerate(pairs):
        if not s.strip() or not t.strip():
            empty += 1
            continue
        kept_idx.append(i)
        src_txt.append(s)
        tgt_txt.append(t)
    src_ids, tgt_ids = tok.encode(src_txt), tok.encode(tgt_txt)
    examples, keep = [], []
    too_long = 0
    for i, s, t in zip(kept_idx, src_ids, tgt_ids):
        if len(s) + 1 > max_len or len(t) + 1 > max_len:
            too_long += 1
            continue
        examples.append((s, t))
        keep.append(i)
    stats[name] = {"pairs": len(pairs), "kept": len(examples), "empty": empty, "too_long": too_long}
    return examples, keep


def prepare(cfg: Config, force: bool = False) -> Prepared:
    """Learn the shared vocabulary on the training split, encode every split, cache by checksum."""
    d = cfg.data
    if cfg.vocab.pad_id != PAD_ID or cfg.vocab.bos_id != BOS_ID or cfg.vocab.eos_id != EOS_ID:
        raise ConfigError(tr("vocab: translation uses pad_id {PAD_ID}, bos_id {BOS_ID}, eos_id {EOS_ID}").format(PAD_ID=PAD_ID, BOS_ID=BOS_ID, EOS_ID=EOS_ID))
    cache, paths = cache_dir_for(cfg)
    meta_path = cache / "meta.json"
    if meta_path.exists() and not force:
        return _load(cache, reused=True)
    log.info("%s", tr("preparing {src} -> {tgt} (vocabulary {size}, {tokenizer}) in {cache}").format(
        src=d.src_lang, tgt=d.tgt_lang, size=d.vocab_size, tokenizer=d.tokenizer, cache=cache))
    raw = {}
    for split in (d.train_split, d.valid_split, d.test_split):
        raw[split] = text.read_parallel(text.split_path(d, split, d.src_lang), text.split_path(d, split, d.tgt_lang))
    for field, split in (("train_split", d.train_split), ("valid_split", d.valid_split), ("test_split", d.test_split)):
        if not any(s.strip() and t.strip() for s, t in raw[split]):
            files = " and ".join(str(text.split_path(d, split, lang)) for lang in (d.src_lang, d.tgt_lang))
            raise DataError(tr("{where}data.{field}: split {split!r} has no text ({files}: every line is empty or whitespace, or only one side has text); fix: put its sentences in the files, or point data.data_dir at a complete Multi30k copy").format(where=origin_of(cfg, f"data.{field}", "data.data_dir"), field=field, split=split, files=files))
    train_text = [s for pair in raw[d.train_split] for s in pair if s.strip()]
    tok = train_tokenizer(train_text, cache / "spm.model", d.vocab_size, d.tokenizer, origin_of(cfg, "data.vocab_size"))
    if len(tok) < d.vocab_size:  # sentencepiece stops where the text runs out of merges (hard_vocab_limit off)
        log.warning(tr("data.vocab_size = %d: the %r text yields only %d pieces, so the vocabulary is %d; set data.vocab_size = %d to silence this"), d.vocab_size, d.train_split, len(tok), len(tok), len(tok))
    stats: dict = {"vocab_size": len(tok), "vocab": tok.hash, "files": [str(p) for p in paths]}
    payload = {}
    for split, pairs in raw.items():
        # train: skip empty and over-long pairs; val/test: keep every sentence for scoring, only skip empty
        max_len = d.max_len if split == d.train_split else 10 ** 9
        examples, keep = _encode_split(tok, pairs, max_len, split, stats)
        payload[split] = {"examples": examples, "references": [pairs[i][1] for i in keep],
                          "sources": [pairs[i][0] for i in keep]}
    kept = stats.get(d.train_split, {})
    if isinstance(kept, dict) and kept.get("pairs") and not kept.get("kept") and kept.get("too_long"):
        raise DataError(tr("{where}data.max_len = {max_len}: every one of the {pairs} {train_split!r} pairs is longer (or empty), so there is nothing to train on; fix: raise data.max_len (the default is 100 pieces)").format(where=origin_of(cfg, "data.max_len"), max_len=d.max_len, pairs=kept['pairs'], train_split=d.train_split))
    for split, s in stats.items():
        if isinstance(s, dict) and (s["empty"] or s["too_long"]):
            log.warning(tr("%s: skipped %d empty and %d over-long (> %d pieces) pairs of %d"),
                        split, s["empty"], s["too_long"], d.max_len, s["pairs"])
    atomic_write(cache / "splits.pt", lambda tmp: torch.save(payload, tmp))
    atomic_write_text(meta_path, json.dumps(stats, indent=2))  # written last: marks the cache complete
    return _load(cache, reused=False)


def _load(cache: Path, reused: bool) -> Prepared:
    try:
        payload = torch.load(cache / "splits.pt", weights_only=True)
        stats = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    except Exception as e:
        from transformer_min.core.messages import reason_without_advice, shorten

        reason = shorten(reason_without_advice(e), 120)
        raise DataError(tr("{cache}: the data cache is unreadable ({name}: {reason}); rebuild it with: tmin data prepare --force (same --config)").format(cache=cache, name=type(e).__name__, reason=reason)) from None
    return Prepared(cache, Tokenizer(cache / "spm.model"),
                    {k: [(list(s), list(t)) for s, t in v["examples"]] for k, v in payload.items()},
                    {k: v["references"] for k, v in payload.items()},
                    {k: v["sources"] for k, v in payload.items()}, stats, reused)


def check_vocab(cfg: Config, prepared: Prepared) -> None:
    n = len(prepared.tokenizer)
    if cfg.vocab.src_size != n or cfg.vocab.tgt_size != n:
        raise ConfigError(tr("{where}vocab.src_size/tgt_size = {src_size}/{tgt_size}, but the prepared vocabulary has {n} pieces; fix: set both to {n} (vocab.src_size = {n}, vocab.tgt_size = {n})").format(where=origin_of(cfg, "vocab.src_size", "vocab.tgt_size"), src_size=cfg.vocab.src_size, tgt_size=cfg.vocab.tgt_size, n=n))


def translation_setup(cfg: Config, run_dir: Path, dist, device) -> tuple[TokenBatcher, Prepared]:
    """The data half of train.task = "translation": this rank's shard of the training pairs, batched by
    length (section 5.1), and the prepared splits the evaluator scores (translation.evaluate builds it:
    decoding and BLEU sit above data). The run directory gets a copy of the subword model. `device` is not
    used here; it keeps the signature every task setup has."""
    from transformer_min.core.distributed import barrier

    # rank 0 builds the cache; the other ranks wait for it, then read it
    prepared = prepare(cfg) if dist.is_main else None
    barrier(dist)
    prepared = prepared or prepare(cfg)
    check_vocab(cfg, prepared)
    if dist.is_main:
        atomic_write_bytes(run_dir / "spm.model", (prepared.cache_dir / "spm.model").read_bytes())
    source = TokenBatcher(prepared.splits[cfg.data.train_split], cfg.train.batch_tokens, cfg.train.seed,
                          BOS_ID, EOS_ID, PAD_ID, dist.rank, dist.world_size)
    log.info(tr("train: %d pairs, %d batches per epoch per rank, padding %.1f%% source, %.1f%% target"),
             len(prepared.splits[cfg.data.train_split]), len(source), 100 * source.padding_fraction(0),
             100 * source.padding_fraction(1))
    return source, prepared


def data_config_summary(d: DataConfig) -> str:
    return f"{d.data_dir} ({d.track}) {d.src_lang}->{d.tgt_lang}, {d.tokenizer} {d.vocab_size}"
