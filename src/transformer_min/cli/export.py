"""`tmin export --ctranslate2`: a thin handler over transformer_min.translation.ct2_export."""

from __future__ import annotations

import argparse

from transformer_min.cli.argtypes import path_arg
from transformer_min.core.i18n import tr


def add_parsers(sub, parents) -> None:
    x = sub.add_parser("export", parents=parents, help="write a checkpoint as a CTranslate2 model directory",
                       description="Write a translation checkpoint as a CTranslate2 model (pip install -e '.[export]'), "
                                   "e.g. tmin export --ctranslate2 --checkpoint runs/multi30k_de_en --out ct2_de_en")
    x.add_argument("--ctranslate2", action="store_true", required=True, help="the format (the only one so far)")
    x.add_argument("--checkpoint", required=True, type=path_arg, help="checkpoint file or run directory (its newest)")
    x.add_argument("--out", required=True, type=path_arg, help="the model directory to write")
    x.add_argument("--quantization", choices=["int8", "int8_float32", "float16"], default=None,
                   help="store the weights quantised (default: float32; int8 can also be chosen at load time "
                        "with --compute-type int8)")
    x.add_argument("--force", action="store_true", help="replace an existing --out directory")
    x.set_defaults(func=run_export, needs_config=False)


def run_export(args: argparse.Namespace) -> int:
    from transformer_min.translation.ct2_export import export_ctranslate2

    out = export_ctranslate2(args.checkpoint, args.out, args.quantization, args.force)
    print(tr("CTranslate2 model -> {out}").format(out=out))
    print(tr('  translate: tmin translate --engine ctranslate2 --model {out} "ein hund läuft ."').format(out=out))
    return 0
