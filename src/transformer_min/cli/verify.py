"""`tmin verify [STAGE ...] [--llm] [--csv DIR] [--lang zh|en] [--trace]`: run the check registry stage by stage
and print it."""

from __future__ import annotations

import argparse
import sys

from transformer_min.cli.argtypes import path_arg
from transformer_min.core.i18n import tr

# The stages `tmin verify` knows by name (the registry may hold more: `tmin verify --list`).
CORE_STAGES = ["attention", "multihead", "positional", "encoder", "decoder", "full", "scaling"]


def add_parsers(sub, parents) -> None:
    p = sub.add_parser("verify", parents=parents, help="run the paper's checks stage by stage",
                       description="Run every check of the paper, stage by stage; exit 1 on any FAIL.")
    p.add_argument("stages", nargs="*", metavar="STAGE",
                   help=f"stages to run (default: all): {', '.join(CORE_STAGES)}, ... (see --list)")
    p.add_argument("--llm", action="store_true",
                   help="afterwards, ask the configured LLM to review the attention weights printed above (advisory)")
    p.add_argument("--csv", metavar="DIR", type=path_arg,
                   help="write every printed attention matrix as CSV, one file per head (rows = queries, "
                        "columns = keys)")
    p.add_argument("--trace", action="store_true",
                   help="log each sub-layer's output shape at INFO (pass N encoder.layers.2.self_attn -> shape)")
    p.add_argument("--list", action="store_true", help="list the registered checks and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import csv_dir as make_csv_dir
    from transformer_min.cli.common import project_of, use_language_of
    from transformer_min.core.errors import ConfigError
    from transformer_min.core.i18n import tr
    from transformer_min.model.layers import set_trace
    from transformer_min.model.memory import check_model_memory, check_verify_lengths
    from transformer_min.verify.registry import STAGES, Context, load_all
    from transformer_min.verify.runner import print_list, run_stages

    use_language_of(args)
    cfg = project_of(args).config
    check_model_memory(cfg, stages=True)  # refuse a [model] or stage size that cannot fit, before any runs
    checks = load_all()
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], list(STAGES), n=1)
        raise ConfigError(tr("verify: unknown stage {unknown!r}").format(unknown=unknown[0])
                          + (tr("; did you mean {hint!r}?").format(hint=hint[0]) if hint else f"; stages: {', '.join(STAGES)}"))
    if args.list:
        print_list(checks)
        return 0
    stages = args.stages or list(STAGES)
    check_verify_lengths(cfg, stages)
    csv_dir = make_csv_dir(args.csv) if args.csv else None
    set_trace(args.trace)
    ctx = Context(cfg)
    print(tr("config: {source}").format(source=tr(cfg.source)))  # the built-in defaults named in Chinese too
    try:
        outcomes = run_stages(ctx, stages, out=sys.stdout, csv_dir=csv_dir)
    finally:
        set_trace(False)
    failed = [o for o in outcomes if o.failed]  # a skipped check is neither a pass nor a failure
    if args.llm:
        _llm_review(ctx, args, stages, local_ok=not failed)
    return 1 if failed else 0


def _llm_review(ctx, args, stages: list[str], local_ok: bool) -> None:
    """Advisory only: the model's words never change the exit code. It gets the weights printed above."""
    from transformer_min.core.i18n import language, tr

    label, weights = printed_weights(ctx, stages)
    summary = llm_summary(weights, label)
    summary["local_verdict"] = "PASS" if local_ok else "FAIL"
    summary["language"] = language()
    try:
        from transformer_min.channel.review import format_review, review_attention
        from transformer_min.channel.schema import channel_part
    except ModuleNotFoundError:
        print("\n" + tr("LLM review skipped: the channel is not installed (pip install 'transformer-min[channel]')."))
        return
    from transformer_min.cli.common import project_of

    status, text = review_attention(summary, channel=channel_part(project_of(args)))  # the files were read once
    if status != "skipped":  # nothing is sent when there is no usable key
        print("\n" + tr("sent to the model: {label}, weights {shape}, head 0 and the row sums as printed above").format(
            label=label, shape=tuple(summary["shape"])))
    print()
    print(format_review(status, text))


def printed_weights(ctx, stages: list[str]):
    """(label, weights (h, L, L) of sentence 0) that the screen showed: the [attention] demo when its stage ran
    (the posts' (8, 6, 6)), else the multihead stage's; the demo when neither ran (then it is said so)."""
    from transformer_min.core.i18n import tr
    from transformer_min.verify.checks import attention, multihead

    if "multihead" in stages and "attention" not in stages:
        return tr("the multihead stage's weights, sentence 0"), multihead.setup(ctx)["weights"][0]
    label = tr("the [attention] demo's weights, sentence 0")
    if "attention" not in stages:
        label += " " + tr("(not printed above: the attention stage did not run)")
    return label, attention.demo(ctx)["weights"][0]


def llm_summary(weights, label: str) -> dict:
    """What `tmin verify --llm` sends: weights (h, L, L) as printed (shape, head 0 and its row sums rounded as on
    screen) plus the entropy per head."""
    import math

    from transformer_min.verify.measures import attention_entropy
    from transformer_min.verify.printing import DIGITS, MAX_SHOWN, SUM_DIGITS

    entropy = attention_entropy(weights)  # (H,)
    head0 = weights[0]
    return {
        "source": label,
        "shape": list(weights.shape),
        "row_sums": [round(s, SUM_DIGITS) for s in head0.sum(-1).tolist()],
        "head0": [[round(x, DIGITS) for x in row[:MAX_SHOWN]] for row in head0.tolist()[:MAX_SHOWN]],
        "head0_rows": head0.shape[0],
        "entropy_per_head": [round(e, 4) for e in entropy.tolist()],
        "max_entropy": round(math.log(weights.shape[-1]), 4),
    }
