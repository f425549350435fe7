"""`tmin verify [STAGE ...] [--llm]`: run the check registry stage by stage and print it."""

from __future__ import annotations

import argparse
import sys

# The stages `tmin verify` knows by name (the registry may hold more: `tmin verify --list`).
CORE_STAGES = ["attention", "multihead", "positional", "encoder", "decoder", "full", "scaling"]


def add_parsers(sub, parents) -> None:
    p = sub.add_parser("verify", parents=parents, help="run the paper's checks stage by stage",
                       description="Run every check of the paper, stage by stage; exit 1 on any FAIL.")
    p.add_argument("stages", nargs="*", metavar="STAGE",
                   help=f"stages to run (default: all): {', '.join(CORE_STAGES)}, ... (see --list)")
    p.add_argument("--llm", action="store_true",
                   help="afterwards, ask the configured LLM to review the multi-head weights (advisory)")
    p.add_argument("--list", action="store_true", help="list the registered checks and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformer_min.config import load_config
    from transformer_min.errors import ConfigError
    from transformer_min.model import check_model_memory
    from transformer_min.verify.registry import STAGES, Context, load_all
    from transformer_min.verify.runner import print_list, run_stages

    cfg = load_config(args.config)
    check_model_memory(cfg, stages=True)  # refuse a [model] or stage size that cannot fit, before any runs
    checks = load_all()
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], list(STAGES), n=1)
        raise ConfigError(f"verify: unknown stage {unknown[0]!r}"
                          + (f"; did you mean {hint[0]!r}?" if hint else f"; stages: {', '.join(STAGES)}"))
    if args.list:
        print_list(checks)
        return 0
    ctx = Context(cfg)
    print(f"config: {cfg.source}")
    outcomes = run_stages(ctx, args.stages or list(STAGES), out=sys.stdout)
    failed = [o for o in outcomes if not o.passed]
    if args.llm:
        _llm_review(ctx, args, local_ok=not failed)
    return 1 if failed else 0


def _llm_review(ctx, args, local_ok: bool) -> None:
    """Advisory only: the model's words never change the exit code."""
    from transformer_min.verify.checks.multihead import llm_summary

    summary = llm_summary(ctx)
    summary["local_verdict"] = "PASS" if local_ok else "FAIL"
    try:
        from transformer_min.channel.review import format_review, review_attention
    except ModuleNotFoundError:
        print("\nLLM review skipped: the channel is not installed (pip install 'transformer-min[channel]').")
        return
    from transformer_min.config import resolve_config_path

    status, text = review_attention(summary, config_path=resolve_config_path(args.config),
                                    settings_path=args.settings)
    print()
    print(format_review(status, text))
