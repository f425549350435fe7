"""How exact is `tmin export --hf`? Export a translation checkpoint, load the folder with transformers offline,
and measure against our own model on a prepared split (docs/export.md records the output):

- teacher-forced logits on the first --logits sentences (source and reference): max |ours - MarianMT|;
- greedy (beam 1): our search against `model.generate` on the first --sentences sentences;
- beam --beam (the run's alpha, then alpha 0): our tensor2tensor search against transformers' beam search;
- BLEU of the whole split through `--engine torch` and `--engine hf` (beam 1 and --beam), sacrebleu signature.

    python benchmarks/bench_hf_export.py --checkpoint runs/multi30k_de_en --split test_2016_flickr
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def logits_diff(model, hf, examples, n: int) -> float:
    import torch

    worst = 0.0
    for src, tgt in examples[:n]:
        with torch.no_grad():
            ours = model(torch.tensor([src + [2]]), torch.tensor([[1] + tgt]))[0]
        worst = max(worst, (ours - hf.logits(src, tgt)).abs().max().item())
    return worst


def agreement(model, hf, src, beam: int, alpha: float, offset: int) -> tuple[int, float, float]:
    from transformer_min.translation.translate import translate_ids

    t0 = time.perf_counter()
    ours = translate_ids(model, src, beam, alpha, offset, "cpu")
    t1 = time.perf_counter()
    theirs = hf.translate_ids(src, beam, alpha, offset)
    t2 = time.perf_counter()
    return sum(a == b for a, b in zip(ours, theirs)), t1 - t0, t2 - t1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a translation checkpoint file or run directory")
    p.add_argument("--split", default="test_2016_flickr", help="a prepared split of the run's data")
    p.add_argument("--logits", type=int, default=50, help="sentences for the logits check")
    p.add_argument("--sentences", type=int, default=100, help="sentences for the greedy and beam agreement")
    p.add_argument("--beam", type=int, default=4, help="beam size of the beam comparison")
    p.add_argument("--no-bleu", action="store_true", help="skip the BLEU of the whole split")
    args = p.parse_args(argv)

    import torch

    from transformer_min.cli.main import main as tmin
    from transformer_min.data.pipeline import prepare
    from transformer_min.model.saved import load_model
    from transformer_min.translation.hf_engine import load_hf_model
    from transformer_min.translation.hf_export import export_hf

    torch.manual_seed(0)
    model, cfg = load_model(args.checkpoint)
    examples = prepare(cfg).splits[args.split]
    out = Path(tempfile.mkdtemp(prefix="hf_export_")) / "hf"
    export_hf(args.checkpoint, out)
    hf = load_hf_model(out)
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}; {args.checkpoint} -> {out}")
    print(f"teacher-forced logits, {args.logits} {args.split} sentences: max |ours - MarianMT| = "
          f"{logits_diff(model, hf, examples, args.logits):.2e}")
    src = [s for s, _ in examples[:args.sentences]]
    alpha, offset = cfg.decode.length_penalty, cfg.decode.max_len_offset
    for beam, a in ((1, alpha), (args.beam, alpha), (args.beam, 0.0)):  # alpha 0: both penalties are 1
        same, ours_s, hf_s = agreement(model, hf, src, beam, a, offset)
        print(f"beam {beam} (alpha {a}): {same}/{len(src)} identical; ours {ours_s:.1f} s, transformers {hf_s:.1f} s")
    if not args.no_bleu:
        for beam in (1, args.beam):
            for engine in (["--checkpoint", args.checkpoint], ["--engine", "hf", "--model", str(out)]):
                tmin(["eval", *engine, "--split", args.split, "--beam", str(beam), "--out", str(out.parent / "hyp")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
