"""Are the fp32 translations of two versions of the code the same? (issue 37: "the fp32 path's outputs stay
identical to today's").

    python benchmarks/same_outputs.py --checkpoint RUN/checkpoints/averaged.safetensors \\
        --before ../old_clone/src --after src

Each source tree translates the checkpoint's prepared test split (beam 4, t2t search, 1 thread) at each batch
size in a fresh process of its own, so the two versions never share an import; the token ids are compared
sentence by sentence. Prints the share identical per batch size and the first differing sentence; exits 1 if
any differ (a check, unlike the timing benchmarks), 2 if a run failed. Run it from the directory the
checkpoint's data paths are relative to.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from transformer_min.translation.translate import load_translator
from transformer_min.data.pipeline import prepare
t = load_translator(sys.argv[3], int(sys.argv[4]), None, precision="fp32")
src = [s for s, _ in prepare(t.cfg).splits[sys.argv[5]]]
src = src[: int(sys.argv[6])] if int(sys.argv[6]) else src
out = {b: t.translate_ids(src, t.alpha, "t2t", batch_size=int(b)) for b in sys.argv[7].split(",")}
json.dump(out, open(sys.argv[2], "w"))
"""


def translate(tree: Path, out: Path, args: argparse.Namespace) -> dict[str, list]:
    cmd = [sys.executable, "-c", CHILD, str(tree.resolve()), str(out), args.checkpoint, str(args.beam),
           args.split, str(args.sentences), args.batches]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the run with {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a translation checkpoint or run directory")
    ap.add_argument("--before", required=True, type=Path, help="the src/ folder of the reference version")
    ap.add_argument("--after", required=True, type=Path, help="the src/ folder of the changed version")
    ap.add_argument("--split", default="test_2016_flickr", help="a prepared split of the checkpoint's data")
    ap.add_argument("--batches", default="1,32", help="batch sizes in sentences (default 1,32)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--sentences", type=int, default=0, help="the first N sentences (0: all)")
    args = ap.parse_args()
    for tree in (args.before, args.after):
        if not (tree / "transformer_min" / "__init__.py").is_file():
            ap.error(f"{tree} is not a src/ folder holding transformer_min: give the folder above the package")
    with tempfile.TemporaryDirectory() as tmp:
        before = translate(args.before, Path(tmp) / "before.json", args)
        after = translate(args.after, Path(tmp) / "after.json", args)
    differ = 0
    for b, hyps in before.items():
        diff = [i for i, (x, y) in enumerate(zip(hyps, after[b])) if x != y]
        differ += len(diff)
        print(f"batch {b}: {len(hyps) - len(diff)} of {len(hyps)} translations identical"
              + (f" (first differing: sentence {diff[0]})" if diff else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
