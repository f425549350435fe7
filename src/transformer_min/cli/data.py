"""`tmin data prepare`: a thin handler over transformer_min.data.pipeline."""

from __future__ import annotations

import argparse


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
    print(f"{'reused' if p.reused else 'prepared'} {data_config_summary(cfg.data)} -> {p.cache_dir}")
    for split in (cfg.data.train_split, cfg.data.valid_split, cfg.data.test_split):
        s = p.stats[split]
        print(f"  {split:18s} {s['kept']:6d} pairs kept of {s['pairs']} "
              f"(skipped: {s['empty']} empty, {s['too_long']} over {cfg.data.max_len} pieces)")
    print(f"  vocabulary: {p.stats['vocab_size']} shared pieces ({p.cache_dir / 'spm.model'})")
    return 0
