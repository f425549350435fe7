"""`tmin data prepare` and the translation task: shared vocabulary, encoded splits, cache, evaluation."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_min.core.config import Config, DataConfig
from transformer_min.data import text
from transformer_min.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer
from transformer_min.core.errors import ConfigError, DataError
from transformer_min.core.io import atomic_write, atomic_write_bytes, atomic_write_text

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


def cache_dir_for(cfg: Config) -> tuple[Path, list[Path]]:
    d = cfg.data
    paths = [text.split_path(d, s, lang) for s in (d.train_split, d.valid_split, d.test_split)
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
        raise ConfigError(f"vocab: translation uses pad_id {PAD_ID}, bos_id {BOS_ID}, eos_id {EOS_ID}")
    cache, paths = cache_dir_for(cfg)
    meta_path = cache / "meta.json"
    if meta_path.exists() and not force:
        return _load(cache, reused=True)
    log.info("preparing %s -> %s (vocabulary %d, %s) in %s", d.src_lang, d.tgt_lang, d.vocab_size, d.tokenizer, cache)
    raw = {}
    for split in (d.train_split, d.valid_split, d.test_split):
        raw[split] = text.read_parallel(text.split_path(d, split, d.src_lang), text.split_path(d, split, d.tgt_lang))
    for field, split in (("train_split", d.train_split), ("valid_split", d.valid_split), ("test_split", d.test_split)):
        if not any(s.strip() and t.strip() for s, t in raw[split]):
            files = " and ".join(str(text.split_path(d, split, lang)) for lang in (d.src_lang, d.tgt_lang))
            raise DataError(f"data.{field}: split {split!r} has no text ({files}: every line is empty or "
                            "whitespace, or only one side has text); put its sentences in the files, or point "
                            "data.data_dir at a complete Multi30k copy")
    train_text = [s for pair in raw[d.train_split] for s in pair if s.strip()]
    tok = train_tokenizer(train_text, cache / "spm.model", d.vocab_size, d.tokenizer)
    if len(tok) < d.vocab_size:  # sentencepiece stops where the text runs out of merges (hard_vocab_limit off)
        log.warning("data.vocab_size = %d: the %r text yields only %d pieces, so the vocabulary is %d; set "
                    "data.vocab_size = %d to silence this", d.vocab_size, d.train_split, len(tok), len(tok), len(tok))
    stats: dict = {"vocab_size": len(tok), "files": [str(p) for p in paths]}
    payload = {}
    for split, pairs in raw.items():
        # train: skip empty and over-long pairs; val/test: keep every sentence for scoring, only skip empty
        max_len = d.max_len if split == d.train_split else 10 ** 9
        examples, keep = _encode_split(tok, pairs, max_len, split, stats)
        payload[split] = {"examples": examples, "references": [pairs[i][1] for i in keep],
                          "sources": [pairs[i][0] for i in keep]}
    kept = stats.get(d.train_split, {})
    if isinstance(kept, dict) and kept.get("pairs") and not kept.get("kept") and kept.get("too_long"):
        raise DataError(f"data.max_len = {d.max_len}: every one of the {kept['pairs']} {d.train_split!r} pairs is "
                        f"longer (or empty), so there is nothing to train on; fix: raise data.max_len (the default "
                        "is 100 pieces)")
    for split, s in stats.items():
        if isinstance(s, dict) and (s["empty"] or s["too_long"]):
            log.warning("%s: skipped %d empty and %d over-long (> %d pieces) pairs of %d",
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
        raise DataError(f"{cache}: the data cache is unreadable ({type(e).__name__}: {reason}); rebuild it "
                        "with: tmin data prepare --force (same --config)") from None
    return Prepared(cache, Tokenizer(cache / "spm.model"),
                    {k: [(list(s), list(t)) for s, t in v["examples"]] for k, v in payload.items()},
                    {k: v["references"] for k, v in payload.items()},
                    {k: v["sources"] for k, v in payload.items()}, stats, reused)


def check_vocab(cfg: Config, prepared: Prepared) -> None:
    n = len(prepared.tokenizer)
    if cfg.vocab.src_size != n or cfg.vocab.tgt_size != n:
        raise ConfigError(f"vocab.src_size/tgt_size: {cfg.vocab.src_size}/{cfg.vocab.tgt_size} but the "
                          f"prepared vocabulary has {n} pieces; set both to {n}")


# ----------------------------------------------------------------------------- decoding + scoring
def too_long(src_lists: list[list[int]], max_len: int, split: str, sources: list[str] | None = None) -> set[int]:
    """Indices of sources the model cannot take (pieces + EOS > model.max_len), each named in a warning:
    they are decoded as empty translations, so the split is still scored on every sentence."""
    skip = {i for i, s in enumerate(src_lists) if len(s) + 1 > max_len}
    for i in sorted(skip)[:5]:
        words = (sources[i] if sources else "").split()
        preview = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
        log.warning("%s: sentence %d (%r) has %d pieces, more than model.max_len %d allows; it is scored as an "
                    "empty translation", split, i + 1, preview, len(src_lists[i]), max_len)
    if len(skip) > 5:
        log.warning("%s: %d sentences in all are over model.max_len %d and scored as empty", split, len(skip), max_len)
    return skip


def translate_ids(model, src_lists: list[list[int]], beam_size: int, alpha: float, max_len_offset: int,
                  device, batch_size: int = 100, skip: set[int] = frozenset(),
                  search: str = "t2t") -> list[list[int]]:
    """Decode source id lists (no EOS) in length-sorted batches; greedy when beam_size == 1; `search`:
    decode.search, the beam search of section 6.1 ("t2t") or the earlier one ("slots"). The indices in
    `skip` (see `too_long`) are not decoded: their translation is empty."""
    from transformer_min.decoding.search import beam_search, greedy_decode, strip
    from transformer_min.data.batch import pad_sequences

    order = sorted((i for i in range(len(src_lists)) if i not in skip), key=lambda i: len(src_lists[i]))
    out: list[list[int]] = [[] for _ in src_lists]
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        src = pad_sequences([src_lists[i] + [EOS_ID] for i in idx], PAD_ID).to(device)
        if beam_size > 1:
            hyp = beam_search(model, src, BOS_ID, EOS_ID, PAD_ID, beam_size, alpha, max_len_offset,
                              search=search)
        else:
            hyp = greedy_decode(model, src, BOS_ID, EOS_ID, PAD_ID, max_len_offset)
        for i, h in zip(idx, strip(hyp, EOS_ID, PAD_ID)):
            out[i] = h
    return out


def score(hyps: list[str], refs: list[str], track: str) -> dict:
    """Corpus BLEU and chrF with sacrebleu against one reference per sentence."""
    return score_refs(hyps, [refs], track)


def score_refs(hyps: list[str], ref_sets: list[list[str]], track: str) -> dict:
    """Corpus BLEU and chrF with sacrebleu against one or more references per sentence (`ref_sets`: one
    list per reference file); tokenize='none' on the pre-tokenized track."""
    import sacrebleu

    # the tok track is tokenized by the dataset's own script: score it as is (no detokenize warning)
    bleu = sacrebleu.metrics.BLEU(tokenize="none" if track == "tok" else "13a", force=track == "tok")
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hyps, ref_sets)
    c = chrf.corpus_score(hyps, ref_sets)
    return {"bleu": b.score, "chrf": c.score, "bp": b.bp, "sys_len": b.sys_len, "ref_len": b.ref_len,
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}


def normalize_input(line: str, track: str, lang: str = "en") -> str:
    """What a user types, preprocessed as the training data was: on the tok track, the Multi30k
    pipeline (`moses_preprocess`); on the raw track, only stripped."""
    if track != "tok":
        return line.strip()
    return moses_preprocess([line], lang)[0]


def moses_preprocess(lines: list[str], lang: str) -> list[str]:
    """The preprocessing the Multi30k tok files (`*.lc.norm.tok.*`) were made with, the dataset's task-1
    script: Moses lowercase.perl, normalize-punctuation.perl -l LANG, tokenizer.perl -l LANG, here through
    sacremoses. As in the Perl pipeline the tokenizer escapes & ' " < > | [ ] as XML entities (&apos; ...),
    and the normaliser sees each line with its newline, which some of its rules test for (a German
    „quote.“ ends as &quot; . , not . &quot;). Reproduces the shared val and test files line for line."""
    norm, tok = _moses(lang)
    return [tok.tokenize(norm.normalize(line.strip().lower() + "\n").strip(), escape=True, return_str=True)
            for line in lines]


def as_track_text(lines: list[str], lang: str, track: str, form: str, name: str) -> tuple[list[str], str]:
    """A test file's lines (`tmin eval --src/--ref`) as the text the model was trained on, and the form
    they were read as. form "tok": already preprocessed like the Multi30k tok files, used as they are;
    "raw": original text, preprocessed with `moses_preprocess` on the tok track, only stripped on the
    raw track; "auto": tok when at least half of the non-empty lines are left unchanged by
    `moses_preprocess` (Multi30k's raw files: at most 0.2% of lines; its tok files: 97-99.5% in English
    and German, 60% in French, whose apostrophes change on a second pass)."""
    pre = None
    if form == "auto":
        pre = moses_preprocess(lines, lang)
        pairs = [(a.strip(), b) for a, b in zip(lines, pre) if a.strip()]
        form = "tok" if pairs and 2 * sum(a == b for a, b in pairs) >= len(pairs) else "raw"
    if form == "tok" and track != "tok":
        raise DataError(f"{name}: reads as lowercased Moses-tokenised text, but the checkpoint was trained on the "
                        f"raw track (data.track = \"raw\"): give the original text, or --form raw to use the "
                        "file as it is")
    if form == "tok" or track != "tok":
        return [line.strip() for line in lines], form
    return (pre if pre is not None else moses_preprocess(lines, lang)), form


@functools.lru_cache(maxsize=None)
def _moses(lang: str):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


class TranslationEvaluator:
    """Each evaluation: val loss per token (teacher forcing) and BLEU from greedy decoding."""

    def __init__(self, cfg: Config, prepared: Prepared, device):
        self.cfg, self.prepared, self.device = cfg, prepared, device
        split, max_len = cfg.data.valid_split, cfg.model.max_len
        examples = prepared.splits[split]
        self.skip = too_long([s for s, _ in examples], max_len, split, prepared.sources[split])
        self.fitting = [(s, t) for s, t in examples if max(len(s), len(t)) + 1 <= max_len]  # for the loss
        if not self.fitting:
            raise DataError(f"data.valid_split {split!r}: every sentence is longer than model.max_len {max_len} "
                            "allows; raise model.max_len or choose another data.valid_split")

    def __call__(self, model, final: bool) -> dict:
        from transformer_min.data.batching import TokenBatcher
        from transformer_min.training.loss import label_smoothed_nll

        split = self.cfg.data.valid_split
        examples = self.prepared.splits[split]
        batcher = TokenBatcher(self.fitting, 4000, 0, BOS_ID, EOS_ID, PAD_ID)
        nll = ntok = 0.0
        for _ in range(len(batcher)):
            b = batcher.next_batch().to(self.device)
            _, n, k = label_smoothed_nll(model(b.src, b.tgt_in), b.tgt_out, 0.0, PAD_ID)
            nll, ntok = nll + n.item(), ntok + k
        hyps = translate_ids(model, [s for s, _ in examples], 1, 0.0, self.cfg.decode.max_len_offset, self.device,
                             skip=self.skip)
        s = score(self.prepared.tokenizer.decode(hyps), self.prepared.references[split], self.cfg.data.track)
        return {"val_nll": nll / ntok, "val_bleu": s["bleu"], "score": s["bleu"]}


def translation_setup(cfg: Config, run_dir: Path, dist, device):
    """Batch source (this rank's shard) and evaluator for train.task = "translation"."""
    from transformer_min.data.batching import TokenBatcher
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
    log.info("train: %d pairs, %d batches per epoch per rank, padding %.1f%% source, %.1f%% target",
             len(prepared.splits[cfg.data.train_split]), len(source), 100 * source.padding_fraction(0),
             100 * source.padding_fraction(1))
    return source, TranslationEvaluator(cfg, prepared, device)


def data_config_summary(d: DataConfig) -> str:
    return f"{d.data_dir} ({d.track}) {d.src_lang}->{d.tgt_lang}, {d.tokenizer} {d.vocab_size}"
