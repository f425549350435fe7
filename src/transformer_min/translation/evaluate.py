"""Scoring a model: `tmin eval` (a checkpoint on a prepared split or on --src/--ref files, beam search and
the length penalty of section 6.1, alpha optionally tuned on val) and the evaluation during training
(validation loss per token with teacher forcing, and BLEU from greedy decoding)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from transformer_min.core.config import Config, origin_of
from transformer_min.core.errors import ConfigError, DataError
from transformer_min.core.io import atomic_write_text
from transformer_min.data.pipeline import Prepared, prepare
from transformer_min.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, check_same_vocabulary
from transformer_min.translation.score import score, score_refs
from transformer_min.translation.testset import check_hyp_out, check_test_files, parse_grid, read_test_set
from transformer_min.translation.translate import (Overrides, Translator, check_engine, load_translator, too_long,
                                                   translate_ids)
from transformer_min.core.i18n import tr

Echo = Callable[[str], None]


class TranslationEvaluator:
    """Each evaluation during training: val loss per token (teacher forcing) and BLEU from greedy decoding."""

    def __init__(self, cfg: Config, prepared: Prepared, device):
        self.cfg, self.prepared, self.device = cfg, prepared, device
        split, max_len = cfg.data.valid_split, cfg.model.max_len
        examples = prepared.splits[split]
        self.skip = too_long([s for s, _ in examples], max_len, split, prepared.sources[split])
        self.fitting = [(s, t) for s, t in examples if max(len(s), len(t)) + 1 <= max_len]  # for the loss
        if not self.fitting:
            raise DataError(tr("{where}model.max_len = {max_len}: every sentence of data.valid_split {split!r} is longer than that allows, so nothing can be validated; fix: raise model.max_len or choose another data.valid_split").format(where=origin_of(cfg, "model.max_len", "data.valid_split"), split=split, max_len=max_len))

    def __call__(self, model, final: bool) -> dict:
        from transformer_min.data.batching import TokenBatcher
        from transformer_min.training.loss import label_smoothed_nll

        split = self.cfg.data.valid_split
        examples = self.prepared.splits[split]
        batcher = TokenBatcher(self.fitting, 4000, 0, BOS_ID, EOS_ID, PAD_ID)
        nll = ntok = 0.0
        for _ in range(len(batcher)):
            b = batcher.next_batch().to(self.device)
            _, n, k = label_smoothed_nll(model(b.src, b.tgt_in), b.tgt_out, 0.0, PAD_ID)  # no smoothing: NLL
            nll, ntok = nll + n.item(), ntok + k
        hyps = translate_ids(model, [s for s, _ in examples], 1, 0.0, self.cfg.decode.max_len_offset, self.device,
                             skip=self.skip)
        s = score(self.prepared.tokenizer.decode(hyps), self.prepared.references[split], self.cfg.data.track)
        return {"val_nll": nll / ntok, "val_bleu": s["bleu"], "score": s["bleu"]}


@dataclass
class EvalRequest:
    """What `tmin eval` was asked: the checkpoint, a prepared split or --src/--ref files, and the search."""

    checkpoint: str | None
    split: str | None = None
    src: str | None = None
    refs: list[str] | None = None
    form: str = "auto"
    beam: int | None = None
    alpha: float | None = None
    search: str | None = None
    tune_alpha: bool = False
    alpha_grid: str = "0.6,1.0,1.4"
    alpha_step: float = 0.4
    hyp_out: str | None = None
    overrides: Overrides | None = None  # the checkpoint's config -> the one used (--set, this machine's [data])
    engine: str = "torch"  # or "ctranslate2": the export in model_dir decodes
    model_dir: str | None = None
    compute_type: str = "default"
    precision: str | None = None  # --precision of our model (None: decode.precision)


class SplitDecoder:
    """Decodes and scores a split (prepared, or the --src/--ref test set under its file name) at one alpha,
    once per (split, alpha): tuning on the scored split decodes it once. Each result is told through echo."""

    def __init__(self, t: Translator, cfg: Config, search: str, prepared: Prepared | None, test_name: str,
                 test_set: tuple | None, echo: Echo):
        self.t, self.cfg, self.search, self.prepared = t, cfg, search, prepared
        self.test_name, self.test_set, self.echo = test_name, test_set, echo
        self.done: dict[tuple[str, float], tuple[list[str], dict]] = {}

    def __call__(self, on: str, alpha: float) -> tuple[list[str], dict]:
        if (on, alpha) not in self.done:
            if self.test_set is not None and on == self.test_name:
                self.done[on, alpha] = self.decode(*self.test_set[:2], alpha)
            else:
                src = [s for s, _ in self.prepared.splits[on]]
                skip = too_long(src, self.cfg.model.max_len, on, self.prepared.sources[on])
                self.done[on, alpha] = self.decode(src, [self.prepared.references[on]], alpha, skip)
        hyps, s = self.done[on, alpha]
        d = self.cfg.data
        self.echo(tr("{src_lang}->{tgt_lang} {on}: BLEU {bleu:.2f} (BP {bp:.3f}, hyp/ref length {sys_len}/{ref_len}), chrF {chrf:.2f}; beam {beam} ({search}), alpha {alpha}, {n_hyps} sentences in {decode_seconds:.0f} s").format(src_lang=d.src_lang, tgt_lang=d.tgt_lang, on=on, bleu=s['bleu'], bp=s['bp'], sys_len=s['sys_len'], ref_len=s['ref_len'], chrf=s['chrf'], beam=self.t.beam, search=self.search, alpha=alpha, n_hyps=len(hyps), decode_seconds=s['decode_seconds']))
        return hyps, s

    def decode(self, src: list[list[int]], ref_sets: list[list[str]], alpha: float,
               skip: set[int] = frozenset()) -> tuple[list[str], dict]:
        t0 = time.perf_counter()
        hyp_ids = self.t.translate_ids(src, alpha, self.search, skip)
        seconds = time.perf_counter() - t0
        hyps = self.t.tokenizer.decode(hyp_ids)
        return hyps, {**score_refs(hyps, ref_sets, self.cfg.data.track), "decode_seconds": round(seconds, 1)}


def tune_alpha(decoder: SplitDecoder, val: str, scored: str, grid: list[float], step: float,
               echo: Echo) -> tuple[float, dict]:
    """The alpha with the best BLEU on `val` (the grid, grown by `step` while its largest alpha wins) and
    the record of the search."""
    from transformer_min.decoding.alpha import choose_alpha

    if scored == val:
        echo(tr("note: alpha is tuned on {val}, the split being scored; its BLEU is optimistic").format(val=val))
    val_bleu = choose_alpha(lambda a: decoder(val, a)[1]["bleu"], grid, step)
    alpha = max(val_bleu, key=val_bleu.get)
    echo(tr("alpha chosen on {val}: {alpha} (").format(val=val, alpha=alpha) + ", ".join(f"{a} -> {b:.2f}" for a, b in val_bleu.items()) + ")")
    return alpha, {"split": val, "bleu": {str(a): b for a, b in val_bleu.items()}, "chosen": alpha}


def hyp_path(req: EvalRequest, t: Translator, cfg: Config, split: str, files: list[Path]) -> Path:
    """--hyp-out, else hyp.<split>.<checkpoint>.<tgt> in the checkpoint's run directory; checked before
    decoding (a typo must not cost a file, nor minutes of decoding)."""
    name = split.removesuffix(".gz")
    out = Path(req.hyp_out) if req.hyp_out else t.out_dir / f"hyp.{name}.{t.label}.{cfg.data.tgt_lang}"
    if files and out.resolve() in [f.resolve() for f in files]:
        raise ConfigError(tr("--out: {out} is one of the input files; choose another file for the hypotheses").format(out=out))
    check_hyp_out(out)
    return out


def evaluate(req: EvalRequest, echo: Echo) -> tuple[dict, Path]:
    """`tmin eval`: decode and score, write the hypotheses and their .json record; -> (record, hyp file)."""
    if req.tune_alpha and req.alpha is not None:
        raise ConfigError(tr("--alpha and --tune-alpha exclude each other: give a fixed alpha or tune it on val"))
    grid = parse_grid(req.alpha_grid) if req.tune_alpha else []
    check_engine(req.engine, req.checkpoint, req.model_dir, req.search, req.precision)
    files = check_test_files(req.src, req.refs, req.split)
    t = load_translator(req.checkpoint, req.beam, req.alpha, req.overrides, req.engine, req.model_dir,
                        req.compute_type, req.precision)
    search, cfg = (req.engine if t.engine else req.search or t.cfg.decode.search), t.cfg
    split = Path(req.src).name if req.src else req.split or cfg.data.test_split
    out = hyp_path(req, t, cfg, split, files)
    test_set = read_test_set(files, req.form, cfg, t.tokenizer, echo) if files else None
    prepared = prepare(cfg) if grid or not files else None
    if prepared is not None:
        check_same_vocabulary((t.vocab, f"the model {t.path}"), (prepared.vocab, f"the prepared data {prepared.cache_dir}"),
                              "score the data the model was trained on (its run's [data] settings, without --set "
                              "data.* that change the vocabulary), or score files with --src/--ref, which are "
                              "encoded with the model's own vocabulary")
    if not files and split not in prepared.splits:
        raise ConfigError(tr("--split: {split!r} is not prepared; choose one of {items}").format(split=split, items=', '.join(prepared.splits)))
    decoder = SplitDecoder(t, cfg, search, prepared, split, test_set, echo)
    alpha, tuned = (tune_alpha(decoder, cfg.data.valid_split, split, grid, req.alpha_step, echo) if grid
                    else (t.alpha, None))
    hyps, s = decoder(split, alpha)
    atomic_write_text(out, "".join(h + "\n" for h in hyps))
    record = {"checkpoint" if t.engine is None else "model": str(t.path), "engine": req.engine, "split": split,
              "beam": t.beam, "search": search, "alpha": alpha, **({} if t.engine else {"precision": t.precision}),
              "sentences": len(hyps), **s}
    if files:
        record.update(src=str(files[0]), refs=[str(f) for f in files[1:]], forms=test_set[2])
    if tuned:
        record["tuned_alpha"] = tuned
    atomic_write_text(out.with_suffix(out.suffix + ".json"), json.dumps(record, indent=2))
    return record, out
