"""`tmin report [--out DIR] [--checkpoint PATH] [--quick]`: write the claim-by-claim report.

torch and matplotlib are imported inside the handler, so `tmin --help` stays instant.
"""

from __future__ import annotations

import argparse
import sys

from transformer_min.cli.argtypes import path_arg
from transformer_min.core.i18n import tr

DEFAULT_OUT = "runs/report"


def add_parsers(sub, parents) -> None:
    p = sub.add_parser(
        "report", parents=parents, help="write the paper checked claim by claim (HTML + Markdown, figures, CSV)",
        description="Run every registered claim of the paper and write report.html (self-contained), report.md, "
                    "figures/*.png and data/*.csv. Exit 1 if any claim fails.")
    p.add_argument("--out", metavar="DIR", type=path_arg, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    p.add_argument("--checkpoint", metavar="PATH", type=path_arg,
                   help="draw the attention heatmaps from this trained model (a `tmin train` checkpoint or run folder)")
    p.add_argument("--quick", action="store_true",
                   help="smaller grids and fewer samples (under 30 s); still every claim")
    p.add_argument("--stage", action="append", metavar="STAGE", dest="stages",
                   help="only this stage's claims, without the measured sections "
                        "(repeatable; see `tmin verify --list`)")
    p.add_argument("--table3", metavar="DIR", type=path_arg,
                   help="add Table 3 retrained at small scale: the results folder of benchmarks/table3.py")
    p.set_defaults(func=run)


def table3_results(args: argparse.Namespace):
    """--table3 DIR: the sweep of benchmarks/table3.py, its finished runs and plan (None without the flag)."""
    if not args.table3:
        return None
    from transformer_min.core.errors import ConfigError
    from transformer_min.report.table3_measured import load_sweep

    if args.stages:  # a partial report has no measured sections
        raise ConfigError(tr("--table3 adds to the full report's Table 3 section; fix: drop --stage, or drop --table3"))
    return load_sweep(args.table3)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from transformer_min.cli.common import project_of, use_language_of
    from transformer_min.core.errors import CheckpointError, ConfigError
    from transformer_min.core.i18n import tr
    from transformer_min.report.build import build_report
    from transformer_min.verify.registry import STAGES, load_all
    from transformer_min.verify.runner import verdict_line

    from transformer_min.model.memory import check_model_memory, check_verify_lengths

    use_language_of(args)
    project = project_of(args)
    cfg = project.config
    check_model_memory(cfg, stages=True)  # refuse a [model] or stage size that cannot fit, before any runs
    if args.checkpoint and not Path(args.checkpoint).exists():  # fail before the claims run, not after
        raise CheckpointError(tr("{checkpoint}: checkpoint not found; pass a checkpoint file or a run folder").format(checkpoint=args.checkpoint))
    table3 = table3_results(args)  # read and checked before the claims run
    out = Path(args.out)
    blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:  # fail before the claims run, not when the first figure is written
        raise ConfigError(tr("--out {out}: {blocker} is a file, not a folder; fix: pass a folder name for the report (it is created), e.g. --out runs/report").format(out=args.out, blocker=blocker))
    check_report_out(out)
    from transformer_min.core.hardware import apply_num_threads

    apply_num_threads(project.runtime.num_threads, project.origin("num_threads"))  # 0: torch's default, bounded
    load_all()
    unknown = [s for s in args.stages or [] if s not in STAGES]
    if unknown:
        raise ConfigError(tr("report: unknown stage {unknown!r}; stages: {items}").format(unknown=unknown[0], items=', '.join(STAGES)))
    check_verify_lengths(cfg, args.stages or list(STAGES))
    result = build_report(cfg, args.out, quick=args.quick, checkpoint=args.checkpoint, stages=args.stages,
                          table3=table3)
    for o in result.failed + result.skipped:  # what did not pass, by name: a skip is not counted as passed
        print(verdict_line(o), file=sys.stdout)
    print(tr("{summary}; report written to {html} and report.md ({seconds:.1f} s)").format(
        summary=result.summary.claims_line(), html=result.out_dir / "report.html", seconds=result.seconds))
    return 0 if result.summary.ok else 1


def check_report_out(out) -> None:
    """--out may be a new or empty folder, or an earlier report (its report.html carries our marker; a report
    from before the marker has report.html and report.md); never a folder of other files."""
    from transformer_min.core.io import check_replaceable, has_marker, page_marker

    marked = has_marker(page_marker("tmin report"))
    check_replaceable(out, "--out", tr("an earlier tmin report (report.html)"), folder=True,
                      recognise=lambda p: marked(p / "report.html") or all((p / f).is_file()
                                                                          for f in ("report.html", "report.md")))
