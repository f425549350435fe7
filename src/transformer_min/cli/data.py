"""`tmin data prepare`: a thin handler over transformer_min.data.pipeline."""

from __future__ import annotations

import argparse
from transformer_min.core.i18n import tr


def add_parsers(sub, parents) -> None:
    d = sub.add_parser("data", help="prepare translation data (shared subword vocabulary, cache)")
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p = dsub.add_parser("prepare", parents=parents, help="learn the vocabulary, encode and cache every split")
    p.add_argument("--force", action="store_true", help="rebuild even if the cache exists")
    p.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    from transformer_min.cli.common import project_of
    from transformer_min.data.pipeline import data_config_summary, prepare

    cfg = project_of(args).config
    p = prepare(cfg, force=args.force)
    done = tr("reused {summary} -> {cache_dir}") if p.reused else tr("prepared {summary} -> {cache_dir}")
    print(done.format(summary=data_config_summary(cfg.data), cache_dir=p.cache_dir))
    for split in (cfg.data.train_split, cfg.data.valid_split, cfg.data.test_split):
        s = p.stats[split]
        print(tr("  {split:18s} {kept:6d} pairs kept of {pairs} (skipped: {empty} empty, {too_long} over {max_len} pieces)").format(split=split, kept=s['kept'], pairs=s['pairs'], empty=s['empty'], too_long=s['too_long'], max_len=cfg.data.max_len))
    print(tr("  vocabulary: {vocab_size} shared pieces ({cache_dir})").format(vocab_size=p.stats['vocab_size'], cache_dir=p.cache_dir / 'spm.model'))
    return 0
