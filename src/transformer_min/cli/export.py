"""`tmin export --ctranslate2` and `tmin export --hf`: thin handlers over transformer_min.translation.ct2_export
and transformer_min.translation.hf_export."""

from __future__ import annotations

import argparse

from transformer_min.cli.argtypes import path_arg
from transformer_min.core.i18n import tr


def add_parsers(sub, parents) -> None:
    x = sub.add_parser("export", parents=parents,
                       help="write a checkpoint as a CTranslate2 model or a transformers MarianMT folder",
                       description="Write a translation checkpoint as a CTranslate2 model (pip install -e '.[export]'), "
                                   "e.g. tmin export --ctranslate2 --checkpoint runs/multi30k_de_en --out ct2_de_en, "
                                   "or as a Hugging Face transformers MarianMT folder (pip install -e '.[hf]'), e.g. "
                                   "tmin export --hf hf_de_en --checkpoint runs/multi30k_de_en")
    fmt = x.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--ctranslate2", action="store_true", help="the format: a CTranslate2 model directory (--out)")
    fmt.add_argument("--hf", metavar="DIR", type=path_arg,
                     help="the format: a Hugging Face transformers MarianMT folder written to DIR "
                          "(pip install -e '.[hf]')")
    x.add_argument("--checkpoint", required=True, type=path_arg, help="checkpoint file or run directory (its newest)")
    x.add_argument("--out", type=path_arg, help="the model directory to write (--ctranslate2)")
    x.add_argument("--quantization", choices=["int8", "int8_float32", "float16"], default=None,
                   help="store the weights quantised (default: float32; int8 can also be chosen at load time "
                        "with --compute-type int8)")
    x.add_argument("--force", action="store_true", help="replace an earlier export (--out or --hf)")
    x.set_defaults(func=run_export, needs_config=False)


def run_export(args: argparse.Namespace) -> int:
    from transformer_min.core.errors import ConfigError
    from transformer_min.translation.ct2_export import export_ctranslate2

    if args.hf:
        return run_export_hf(args)
    if not args.out:
        raise ConfigError(tr("--out: required with --ctranslate2; fix: --out DIR, the model directory to write"))

    out = export_ctranslate2(args.checkpoint, args.out, args.quantization, args.force)
    print(tr("CTranslate2 model -> {out}").format(out=out))
    print(tr('  translate: tmin translate --engine ctranslate2 --model {out} "ein hund läuft ."').format(out=out))
    return 0


def run_export_hf(args: argparse.Namespace) -> int:
    from transformer_min.core.errors import ConfigError
    from transformer_min.translation.hf_export import export_hf

    if args.out or args.quantization:
        flag = "--out" if args.out else "--quantization"
        raise ConfigError(tr("{flag}: not an option of --hf, which names the folder itself and writes float32 "
                             "safetensors; fix: tmin export --hf DIR --checkpoint RUN").format(flag=flag))
    out = export_hf(args.checkpoint, args.hf, args.force)
    print(tr("transformers MarianMT model -> {out}").format(out=out))
    print(tr('  evaluate: tmin eval --engine hf --model {out}').format(out=out))
    print(tr('  python: pipeline("translation", model="{out}")  (from transformers import pipeline)').format(out=out))
    return 0
