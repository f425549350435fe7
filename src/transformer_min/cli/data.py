"""`tmin data prepare`, `tmin average`, `tmin eval`, `tmin translate`: thin handlers."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from transformer_min.core.argtypes import non_negative_float, path_arg, positive_int


def add_parsers(sub, parents) -> None:
    d = sub.add_parser("data", help="prepare translation data (shared subword vocabulary, cache)")
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p = dsub.add_parser("prepare", parents=parents, help="learn the vocabulary, encode and cache every split")
    p.add_argument("--force", action="store_true", help="rebuild even if the cache exists")
    p.set_defaults(func=run_prepare)

    a = sub.add_parser("average", parents=parents, help="average the last checkpoints of a run (section 6.1)")
    a.add_argument("run_dir", type=path_arg, help="a run directory (runs/<name>)")
    a.add_argument("--last", type=positive_int, default=5, help="how many of the newest step checkpoints (default 5)")
    a.add_argument("--out", type=path_arg, help="output file (default: RUN_DIR/checkpoints/averaged.pt)")
    a.set_defaults(func=run_average, needs_config=False)

    e = sub.add_parser("eval", parents=parents, help="decode a split or any test set with beam search and score BLEU/chrF")
    e.add_argument("--checkpoint", required=True, type=path_arg, help="checkpoint file or run directory")
    e.add_argument("--split", default=None, help="a prepared split (default: data.test_split)")
    e.add_argument("--src", metavar="FILE", type=path_arg, help="score this source file instead of a split (plain or .gz, one "
                                                 "sentence per line; raw or tokenised like the tok files)")
    e.add_argument("--ref", metavar="FILE", type=path_arg, action="append", default=None,
                   help="a reference translation of --src, line by line (repeat for several references)")
    e.add_argument("--form", choices=["auto", "raw", "tok"], default="auto",
                   help="--src/--ref files: raw text (preprocessed as the tok files were), tok (used as they are) "
                        "or auto (decided per file from its lines; default)")
    e.add_argument("--beam", type=positive_int, default=None, help="beam size (default: decode.beam_size = 4)")
    e.add_argument("--alpha", type=non_negative_float, default=None,
                   help="length penalty (default: decode.length_penalty)")
    e.add_argument("--search", choices=["t2t", "slots"], default=None,
                   help="beam search: t2t (tensor2tensor's, the paper's) or slots (the earlier one); "
                        "default: decode.search")
    e.add_argument("--tune-alpha", action="store_true",
                   help="choose alpha on the val split first (--alpha-grid, grown while its largest alpha wins)")
    e.add_argument("--alpha-grid", default="0.6,1.0,1.4", help="alphas tried by --tune-alpha (default 0.6,1.0,1.4)")
    e.add_argument("--alpha-step", type=non_negative_float, default=0.4,
                   help="--tune-alpha: while the largest alpha wins on val, try one this much larger (0: off)")
    e.add_argument("--out", "--hyp-out", dest="hyp_out", type=path_arg,
                   help="where to write hypotheses (default: the checkpoint's run directory)")
    e.set_defaults(func=run_eval, needs_config=False)

    t = sub.add_parser("translate", parents=parents, help="translate sentences (arguments or stdin lines)")
    t.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin)")
    t.add_argument("--checkpoint", required=True, type=path_arg, help="checkpoint file or run directory")
    t.add_argument("--beam", type=positive_int, default=None, help="beam size (default: decode.beam_size = 4)")
    t.add_argument("--alpha", type=non_negative_float, default=None,
                   help="length penalty (default: decode.length_penalty)")
    t.add_argument("--search", choices=["t2t", "slots"], default=None, help="beam search (default: decode.search)")
    t.add_argument("--attention", metavar="PNG", type=path_arg, help="draw the cross-attention of the first sentence")
    t.add_argument("--csv", metavar="DIR", type=path_arg, help="write the first sentence's cross-attention as CSV, one file per "
                                                "head and the mean (rows = output pieces, columns = source pieces)")
    t.set_defaults(func=run_translate, needs_config=False)


def run_prepare(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of
    from transformer_min.data.pipeline import data_config_summary, prepare

    cfg = project_of(args).config
    p = prepare(cfg, force=args.force)
    print(f"{'reused' if p.reused else 'prepared'} {data_config_summary(cfg.data)} -> {p.cache_dir}")
    for split in (cfg.data.train_split, cfg.data.valid_split, cfg.data.test_split):
        s = p.stats[split]
        print(f"  {split:18s} {s['kept']:6d} pairs kept of {s['pairs']} "
              f"(skipped: {s['empty']} empty, {s['too_long']} over {cfg.data.max_len} pieces)")
    print(f"  vocabulary: {p.stats['vocab_size']} shared pieces ({p.cache_dir / 'spm.model'})")
    return 0


def run_average(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of
    from transformer_min.core.project import with_sets
    from transformer_min.training.averaging import average_run

    with_sets(None, project_of(args), (), "tmin average (it averages weights)")  # only --set settings.KEY applies
    out, used = average_run(Path(args.run_dir), args.last, Path(args.out) if args.out else None)
    print(f"averaged {len(used)} checkpoints ({', '.join(p.name for p in used)}) -> {out}")
    return 0


def _load_for_translation(args, sections: tuple[str, ...] = ("decode",), command: str = "tmin translate"):
    from transformer_min.cli.common import project_of
    from transformer_min.core.project import with_sets
    from transformer_min.data.tokenizer import Tokenizer
    from transformer_min.core.errors import CheckpointError
    from transformer_min.training.checkpoint import load_model, read_checkpoint

    project = project_of(args)  # the checkpoint's config is used, but a broken file is still an error
    state_path = Path(read_checkpoint(args.checkpoint)["path"])
    model, cfg = load_model(state_path)
    cfg = with_sets(cfg, project, sections, command)  # --set decode.KEY (and data.KEY for eval) on top
    if "data" in sections and getattr(args, "config", None):  # data location may differ on this machine
        cfg = dataclasses.replace(cfg, data=project.config.data)
    spm = state_path.parent.parent / "spm.model"
    if not spm.exists():
        raise CheckpointError(f"{state_path}: no spm.model in its run directory {spm.parent}; "
                              "translation checkpoints live in runs/<name>/checkpoints/")
    beam = cfg.decode.beam_size if args.beam is None else args.beam
    from transformer_min.decoding.search import check_beam

    check_beam(beam, cfg.vocab.tgt_size, "decode.beam_size" if args.beam is None else "--beam")
    alpha = cfg.decode.length_penalty if args.alpha is None else args.alpha
    return model, cfg, Tokenizer(spm), state_path, beam, alpha


def _parse_grid(text: str) -> list[float]:
    import math

    from transformer_min.core.errors import ConfigError

    try:
        grid = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        grid = []
    if not grid or any(not math.isfinite(a) or a < 0 for a in grid):  # nan, inf: not a length penalty
        raise ConfigError(f"--alpha-grid: expected comma-separated finite alphas >= 0 such as 0.6,1.0,1.4, "
                          f"got {text!r}")
    return grid


def _check_hyp_out(out: Path) -> None:
    """--hyp-out may replace only an earlier `tmin eval` output (the hypotheses and their .json record),
    never another file (metrics.jsonl, a config, a reference); a folder is named."""
    import json

    from transformer_min.core.errors import ConfigError

    record = out.with_suffix(out.suffix + ".json")
    if out.is_dir():
        raise ConfigError(f"--hyp-out {out}: is a folder; fix: give a file path such as {out / 'hyp.txt'}")
    if not out.exists() and not record.exists():
        return
    try:
        earlier = {"checkpoint", "split", "sentences"} <= set(json.loads(record.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        earlier = False
    if not earlier:
        taken = out if out.exists() else record
        raise ConfigError(f"--hyp-out {out}: {taken} exists and was not written by tmin eval, so it is left as it "
                          "is; fix: choose another --hyp-out, or delete the file first")


def run_eval(args: argparse.Namespace) -> int:
    import json

    from transformer_min.data.pipeline import prepare
    from transformer_min.decoding.search import choose_alpha
    from transformer_min.core.errors import ConfigError
    from transformer_min.core.io import atomic_write_text

    if args.tune_alpha and args.alpha is not None:
        raise ConfigError("--alpha and --tune-alpha exclude each other: give a fixed alpha or tune it on val")
    grid = _parse_grid(args.alpha_grid) if args.tune_alpha else []
    files = _check_test_files(args)
    model, cfg, tok, path, beam, alpha = _load_for_translation(args, ("decode", "data"), "tmin eval")
    search = args.search or cfg.decode.search
    split = Path(args.src).name if args.src else args.split or cfg.data.test_split
    name = split.removesuffix(".gz")
    out = Path(args.hyp_out) if args.hyp_out else path.parent.parent / f"hyp.{name}.{path.stem}.{cfg.data.tgt_lang}"
    if files and out.resolve() in [f.resolve() for f in files]:
        raise ConfigError(f"--out: {out} is one of the input files; choose another file for the hypotheses")
    _check_hyp_out(out)  # before decoding: a typo must not cost a file, nor minutes of decoding
    test_set = _read_test_set(files, args.form, cfg, tok) if files else None
    prepared = prepare(cfg) if grid or not files else None
    if not files and split not in prepared.splits:
        raise ConfigError(f"--split: {split!r} is not prepared; choose one of {', '.join(prepared.splits)}")
    decoded: dict[tuple[str, float], tuple[list[str], dict]] = {}  # tuning on the scored split decodes once

    def run(on: str, a: float) -> tuple[list[str], dict]:
        if (on, a) not in decoded:
            if files and on == split:
                decoded[on, a] = _decode_and_score_ids(model, cfg, tok, *test_set[:2], beam, a, search)
            else:
                decoded[on, a] = _decode_and_score(model, cfg, tok, prepared, on, beam, a, search)
        hyps, s = decoded[on, a]
        print(f"{cfg.data.src_lang}->{cfg.data.tgt_lang} {on}: BLEU {s['bleu']:.2f} (BP {s['bp']:.3f}, "
              f"hyp/ref length {s['sys_len']}/{s['ref_len']}), chrF {s['chrf']:.2f}; beam {beam} ({search}), alpha {a}, "
              f"{len(hyps)} sentences in {s['decode_seconds']:.0f} s", flush=True)
        return hyps, s

    tuned = None
    if grid:
        val = cfg.data.valid_split
        if split == val:
            print(f"note: alpha is tuned on {val}, the split being scored; its BLEU is optimistic")
        val_bleu = choose_alpha(lambda a: run(val, a)[1]["bleu"], grid, args.alpha_step)
        alpha = max(val_bleu, key=val_bleu.get)
        tuned = {"split": val, "bleu": {str(a): b for a, b in val_bleu.items()}, "chosen": alpha}
        print(f"alpha chosen on {val}: {alpha} (" + ", ".join(f"{a} -> {b:.2f}" for a, b in val_bleu.items()) + ")")
    hyps, s = run(split, alpha)
    atomic_write_text(out, "".join(h + "\n" for h in hyps))
    result = {"checkpoint": str(path), "split": split, "beam": beam, "search": search, "alpha": alpha,
              "sentences": len(hyps), **s}
    if files:
        result.update(src=str(files[0]), refs=[str(f) for f in files[1:]], forms=test_set[2])
    if tuned:
        result["tuned_alpha"] = tuned
    atomic_write_text(out.with_suffix(out.suffix + ".json"), json.dumps(result, indent=2))
    print(f"  {s['bleu_signature']}")
    print(f"  {s['chrf_signature']}")
    print(f"  hypotheses: {out}")
    return 0


def _check_test_files(args) -> list[Path]:
    """--src/--ref: [src, ref, ...] that exist and have the same number of lines; [] without --src."""
    from transformer_min.data import text
    from transformer_min.core.errors import ConfigError, DataError

    if not args.src:
        if args.ref:
            raise ConfigError("--ref needs --src: give the source file the references translate")
        return []
    if args.split:
        raise ConfigError("--src and --split exclude each other: score a prepared split or a file pair")
    if not args.ref:
        raise ConfigError(f"--src {args.src}: give its reference translation with --ref FILE (repeat for several)")
    files = [Path(args.src)] + [Path(r) for r in args.ref]
    for opt, f in zip(["--src"] + ["--ref"] * len(args.ref), files):
        if not f.is_file():
            raise DataError(f"{opt} {f}: no such file; give a plain or .gz text file, one sentence per line")
    for ref in files[1:]:
        text.read_parallel(files[0], ref)  # misaligned files: the named error
    return files


def _read_test_set(files: list[Path], form: str, cfg, tok):
    """(source id lists, reference lists, the form each file was read as) of --src/--ref files."""
    from transformer_min.data import text
    from transformer_min.data.pipeline import as_track_text
    from transformer_min.core.errors import ConfigError

    d = cfg.data
    read = [as_track_text(text.read_lines(f), lang, d.track, form, str(f))
            for f, lang in zip(files, [d.src_lang] + [d.tgt_lang] * (len(files) - 1))]
    for f, (_, used) in zip(files, read):
        print(f"{f}: read as {used} text" + (" (Moses-preprocessed)" if used == "raw" and d.track == "tok" else ""))
    src = tok.encode(read[0][0])
    too_long = [i for i, s in enumerate(src) if len(s) + 1 > cfg.model.max_len]
    if too_long:
        i = too_long[0]
        raise ConfigError(f"--src {files[0]}: line {i + 1} has {len(src[i])} pieces, more than model.max_len "
                          f"{cfg.model.max_len} allows ({len(too_long)} such lines); shorten or split them")
    return src, [lines for lines, _ in read[1:]], [used for _, used in read]


def _decode_and_score(model, cfg, tok, prepared, split: str, beam: int, alpha: float,
                      search: str = "t2t") -> tuple[list[str], dict]:
    from transformer_min.data.pipeline import too_long

    src = [s for s, _ in prepared.splits[split]]
    skip = too_long(src, cfg.model.max_len, split, prepared.sources[split])
    return _decode_and_score_ids(model, cfg, tok, src, [prepared.references[split]], beam, alpha, search, skip)


def _decode_and_score_ids(model, cfg, tok, src: list[list[int]], ref_sets: list[list[str]], beam: int,
                          alpha: float, search: str, skip: set[int] = frozenset()) -> tuple[list[str], dict]:
    import time

    from transformer_min.data.pipeline import score_refs, translate_ids

    t0 = time.perf_counter()
    hyp_ids = translate_ids(model, src, beam, alpha, cfg.decode.max_len_offset, "cpu", skip=skip, search=search)
    seconds = time.perf_counter() - t0
    hyps = tok.decode(hyp_ids)
    return hyps, {**score_refs(hyps, ref_sets, cfg.data.track), "decode_seconds": round(seconds, 1)}


def run_translate(args: argparse.Namespace) -> int:
    import torch

    from transformer_min.data.pipeline import normalize_input, translate_ids
    from transformer_min.core.errors import ConfigError

    blank = next((i for i, line in enumerate(args.sentences or []) if not line.strip()), None)
    if blank is not None:  # an empty argument ("$TEXT" unset) would be "translated" into noise
        raise ConfigError(f"translate: sentence {blank + 1} of the arguments is empty; fix: give the text to "
                          "translate, e.g. tmin translate --checkpoint RUN \"ein hund läuft .\"")
    model, cfg, tok, _, beam, alpha = _load_for_translation(args)
    lines = args.sentences or [line for line in sys.stdin.read().splitlines() if line.strip()]
    if not lines:
        raise ConfigError("translate: give sentences as arguments or on stdin")
    norm = [normalize_input(line, cfg.data.track, cfg.data.src_lang) for line in lines]
    src = tok.encode(norm)
    too_long = [i for i, s in enumerate(src) if len(s) + 1 > cfg.model.max_len]
    if too_long:
        raise ConfigError(f"translate: sentence {too_long[0] + 1} has {len(src[too_long[0]])} pieces, more than "
                          f"model.max_len {cfg.model.max_len} allows; fix: split it into shorter sentences")
    hyps = translate_ids(model, src, beam, alpha, cfg.decode.max_len_offset, "cpu",
                         search=args.search or cfg.decode.search)
    for h in tok.decode(hyps):
        print(h)
    if args.attention or args.csv:
        from transformer_min.decoding.search import cross_attention_heads

        heads = cross_attention_heads(model, torch.tensor([src[0] + [cfg.vocab.eos_id]]), hyps[0],
                                      cfg.vocab.bos_id, cfg.vocab.eos_id)  # (H, T, S)
        rows = [tok.sp.id_to_piece(i) for i in hyps[0]] + ["</s>"]
        cols = [tok.sp.id_to_piece(i) for i in src[0]] + ["</s>"]
    if args.csv:
        from transformer_min.core.matrix_csv import write_cross_attention

        written = write_cross_attention(args.csv, heads, rows, cols)
        print(f"cross-attention of sentence 1 -> {len(written)} CSV files in {args.csv}")
    if args.attention:
        from transformer_min.viz.heatmap import attention_heatmap

        attention_heatmap(heads.mean(0), cols, rows, args.attention, title="cross-attention (last layer, mean of heads)")
        print(f"cross-attention of sentence 1 -> {args.attention}")
    return 0
