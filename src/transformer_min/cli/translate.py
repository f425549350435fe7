"""`tmin eval`, `tmin translate`, `tmin decode`: thin handlers over transformer_min.translation."""

from __future__ import annotations

import argparse
import sys

from transformer_min.cli.argtypes import non_negative_float, path_arg, positive_int
from transformer_min.cli.common import csv_dir
from transformer_min.core.i18n import tr


def add_parsers(sub, parents) -> None:
    add_eval_parser(sub, parents)
    t = sub.add_parser("translate", parents=parents, help="translate sentences (arguments or stdin lines)")
    t.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin)")
    add_model_options(t)
    t.add_argument("--beam", type=positive_int, default=None, help="beam size (default: decode.beam_size = 4)")
    t.add_argument("--alpha", type=non_negative_float, default=None,
                   help="length penalty (default: decode.length_penalty)")
    t.add_argument("--search", choices=["t2t", "slots"], default=None, help="beam search (default: decode.search)")
    t.add_argument("--attention", metavar="PNG", type=path_arg, help="draw the cross-attention of the first sentence")
    t.add_argument("--csv", metavar="DIR", type=path_arg, help="write the first sentence's cross-attention as CSV, one file per "
                                                "head and the mean (rows = output pieces, columns = source pieces)")
    t.set_defaults(func=run_translate, needs_config=False)

    d = sub.add_parser("decode", parents=parents, help="decode token ids with a trained checkpoint",
                       description='Decode a sequence of token ids, e.g. tmin decode --checkpoint runs/x "3 5 7 2"')
    d.add_argument("tokens", help="space-separated source token ids (EOS is appended)")
    d.add_argument("--checkpoint", required=True, type=path_arg, help="a checkpoint file or a run directory (latest)")
    d.add_argument("--beam", type=positive_int, default=None, help="beam size (default: greedy; 1 = greedy)")
    d.add_argument("--alpha", type=non_negative_float, default=None,
                   help="length penalty alpha (default: decode.length_penalty)")
    d.add_argument("--attention", action="store_true", help="also print the cross-attention matrix")
    d.add_argument("--csv", metavar="DIR", type=path_arg, help="write the cross-attention as CSV, one file per head and the mean "
                                                "(rows = output tokens, columns = source tokens)")
    d.set_defaults(func=run_decode, needs_config=False)


def add_model_options(p) -> None:
    """Which model decodes: a checkpoint (--engine torch, our search) or an export (--engine ctranslate2)."""
    p.add_argument("--checkpoint", type=path_arg, help="checkpoint file or run directory (--engine torch)")
    p.add_argument("--engine", choices=["torch", "ctranslate2", "hf"], default="torch",
                   help="torch: our model and beam search (default); ctranslate2: a tmin export --ctranslate2 "
                        "directory (--model), its n-best list re-ranked by the paper's length penalty; hf: a "
                        "MarianMT folder (tmin export --hf, or any MarianMT model) decoded by transformers")
    p.add_argument("--model", metavar="DIR", type=path_arg,
                   help="the export directory (--engine ctranslate2) or MarianMT folder (--engine hf)")
    p.add_argument("--precision", choices=["fp32", "auto", "bf16", "int8"], default=None,
                   help="--engine torch: the decoder step's products (default: decode.precision = fp32, the paper's; "
                        "auto: bf16 where the CPU has native bf16, else fp32; int8: dynamic quantization)")
    p.add_argument("--compute-type", default="default",
                   choices=["default", "float32", "int8", "int8_float32", "float16", "bfloat16", "int8_bfloat16"],
                   help="--engine ctranslate2: weights and arithmetic (default: as exported; int8 quantises at load)")


def add_eval_parser(sub, parents) -> None:
    e = sub.add_parser("eval", parents=parents, help="decode a split or any test set with beam search and score BLEU/chrF")
    add_model_options(e)
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


def checkpoint_overrides(args: argparse.Namespace, sections: tuple[str, ...], command: str):
    """The checkpoint's config -> the one used: --set of `sections` on top (validated; another section's --set
    is refused, the checkpoint fixes it) and, with an explicit --config and [data] among `sections`, this
    machine's [data] (the data may live elsewhere than where the model was trained)."""
    import dataclasses

    from transformer_min.cli.common import project_of
    from transformer_min.core.project import with_sets

    project = project_of(args)  # loaded (and validated) even though the checkpoint's config is used

    def apply(cfg):
        cfg = with_sets(cfg, project, sections, command)
        if "data" in sections and getattr(args, "config", None):
            cfg = dataclasses.replace(cfg, data=project.config.data)
        return cfg

    return apply


def echo(line: str) -> None:
    """Progress lines of a long evaluation, shown as they come (stdout may be a pipe)."""
    print(line, flush=True)


def run_eval(args: argparse.Namespace) -> int:
    from transformer_min.translation.evaluate import EvalRequest, evaluate

    record, out = evaluate(EvalRequest(
        args.checkpoint, split=args.split, src=args.src, refs=args.ref, form=args.form, beam=args.beam,
        alpha=args.alpha, search=args.search, tune_alpha=args.tune_alpha, alpha_grid=args.alpha_grid,
        alpha_step=args.alpha_step, hyp_out=args.hyp_out,
        overrides=checkpoint_overrides(args, ("decode", "data"), "tmin eval"), engine=args.engine,
        model_dir=args.model, compute_type=args.compute_type, precision=args.precision), echo)
    print(f"  {record['bleu_signature']}")
    print(f"  {record['chrf_signature']}")
    print(tr("  hypotheses: {path}").format(path=out))
    return 0


def run_translate(args: argparse.Namespace) -> int:
    from transformer_min.translation.translate import translate

    if args.attention:  # named before the model loads: a figure replaces only an earlier figure of ours
        from transformer_min.core.figure import PNG_MARKER
        from transformer_min.core.io import check_replaceable, has_marker

        check_replaceable(args.attention, "--attention", tr("an earlier tmin figure (PNG)"), has_marker(PNG_MARKER))
    result = translate(args.checkpoint, args.sentences, sys.stdin, args.beam, args.alpha, args.search,
                       checkpoint_overrides(args, ("decode",), "tmin translate"),
                       attention=bool(args.attention or args.csv), engine=args.engine, model_dir=args.model,
                       compute_type=args.compute_type, precision=args.precision)
    for h in result.hyps:
        print(h)
    if args.csv:
        from transformer_min.core.matrix_csv import write_cross_attention

        written = write_cross_attention(csv_dir(args.csv), result.heads, result.rows, result.cols)
        print(tr("cross-attention of sentence 1 -> {n_written} CSV files in {csv}").format(n_written=len(written), csv=args.csv))
    if args.attention:
        from transformer_min.viz.heatmap import attention_heatmap

        attention_heatmap(result.heads.mean(0), result.cols, result.rows, args.attention,
                          title="cross-attention (last layer, mean of heads)")
        print(tr("cross-attention of sentence 1 -> {attention}").format(attention=args.attention))
    return 0


def run_decode(args: argparse.Namespace) -> int:
    from transformer_min.translation.token_ids import decode_tokens

    d = decode_tokens(args.checkpoint, args.tokens, args.beam, args.alpha,
                      checkpoint_overrides(args, ("decode",), "tmin decode"), attention=bool(args.attention or args.csv))
    print(" ".join(map(str, d.output)))
    rows = [*d.output, d.eos_id]  # output tokens + EOS
    if args.csv:
        from transformer_min.core.matrix_csv import write_cross_attention

        written = write_cross_attention(csv_dir(args.csv), d.heads, [str(t) for t in rows], [str(t) for t in d.source])
        print(tr("cross-attention (last layer) -> {n_written} CSV files in {csv}").format(n_written=len(written), csv=args.csv))
    if args.attention:
        att = d.heads.mean(0)  # (T, S)
        print(tr("\ncross-attention (last layer, mean over heads); rows = output + EOS, columns = source"))
        print("      " + " ".join(f"{t:>5d}" for t in d.source))
        for tok, row in zip(rows, att.tolist()):
            print(f"{tok:>5d} " + " ".join(f"{x:5.2f}" for x in row))
    return 0
