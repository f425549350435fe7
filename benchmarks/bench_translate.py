"""Benchmark: translation speed of our beam search against CTranslate2 (fp32 and int8), in one run.

    python benchmarks/bench_translate.py --checkpoint runs/multi30k_de_en/checkpoints/averaged.pt
    python benchmarks/bench_translate.py --checkpoint RUN --src test.de.gz --ref test.en.gz
    python benchmarks/bench_translate.py --checkpoint RUN --quick         # 64 sentences, one repetition
    python benchmarks/bench_translate.py --checkpoint RUN --precision int8,bf16   # rows of ours in int8, bf16

The model is exported to a temporary folder (tmin export --ctranslate2) unless --model names an export. The
sentences are the checkpoint's prepared test split (data.test_split; data.data_dir must hold the data), or
--src/--ref files as `tmin eval` reads them. Every engine translates every sentence with beam 4 (section
6.1, alpha = decode.length_penalty unless --alpha) at each --batches size, with --threads threads for each
engine (torch.set_num_threads; CTranslate2's intra_threads). Each timing runs in a fresh process (torch's and
CTranslate2's OpenMP thread pools in one process slow each other down), repetitions are interleaved (each
runs every engine and batch size, the engine order rotating), and the table shows medians:

  sent/s, target tok/s   sentences and output tokens (EOS excluded) per second of decoding
  same as ours           share of sentences whose output equals ours at that batch size
  BLEU                   against the references (sacrebleu, as tmin eval scores)

and the ratio ours / CTranslate2 fp32 in time per batch size (issue 37: goal <= 1.3, bar <= 1.5, at batch 1
and 32), in wall-clock time and in each process's CPU time (steadier where other work shares the cores).
--precision adds a row of ours per precision (decode.precision: int8, bf16, or auto, which is bf16 where the
CPU has native bf16 and fp32 elsewhere), "same as ours" then being the share equal to ours in fp32, with the
ratios ours int8 / CTranslate2 int8 (issue 37: goal <= 1.3, bar <= 1.5), ours bf16 / CTranslate2 fp32, and
each against ours fp32. The machine is named first: the CPU and capability lines of `tmin doctor`.
If ctranslate2 is not installed, it says so and times ours alone. A benchmark, not a test: it exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works without `pip install -e .`

from transformer_min.cli.doctor import doctor_cpu_lines  # noqa: E402
from transformer_min.core.decode_precision import resolve_decode_precision  # noqa: E402
from transformer_min.core.errors import ConfigError  # noqa: E402
from transformer_min.core.hardware import apply_num_threads, cpu_info  # noqa: E402
from transformer_min.translation.score import score_refs  # noqa: E402
from transformer_min.translation.translate import load_translator  # noqa: E402

GOAL, BAR = 1.3, 1.5  # issue 37: ours / CTranslate2 in time, fp32 against fp32 and int8 against int8


def verdict(r: float) -> str:
    """Issue 37's goal for a time ratio ours / CTranslate2, e.g. "PASS, goal <= 1.3"."""
    return f"{'PASS' if r <= GOAL else 'MISS'}, goal <= {GOAL}"


def test_set(args, t) -> tuple[list[list[int]], list[list[str]]]:
    """(source ids, reference sets): --src/--ref files, else the checkpoint's prepared test split."""
    if args.src:
        from transformer_min.translation.testset import check_test_files, read_test_set

        src, refs, _ = read_test_set(check_test_files(args.src, args.ref, None), "auto", t.cfg, t.tokenizer,
                                     lambda line: print(line))
        return src, refs
    from transformer_min.data.pipeline import prepare

    prepared = prepare(t.cfg)
    split = t.cfg.data.test_split
    return [s for s, _ in prepared.splits[split]], [prepared.references[split]]


ENGINES = {"ours": ("torch", "fp32"), "ours int8": ("torch", "int8"), "ours bf16": ("torch", "bf16"),
           "ct2 fp32": ("ctranslate2", "float32"), "ct2 int8": ("ctranslate2", "int8")}


def translator(args, name: str):
    engine, compute = ENGINES[name]
    if engine == "torch":
        return load_translator(args.checkpoint, args.beam, args.alpha, precision=compute)
    return load_translator(None, args.beam, args.alpha, engine=engine, model_dir=args.model, compute_type=compute)


def worker(args) -> int:
    """One timing in this process: --worker ENGINE --batch B; writes {seconds, hyps} to --result."""
    apply_num_threads(args.threads, "--threads")  # CTranslate2's intra_threads follow it (ct2_engine.load_ct2_model)
    t = translator(args, args.worker)
    src, _ = test_set(args, t)
    if args.sentences:
        src = src[:args.sentences]
    t.translate_ids(src[:4], t.alpha, "t2t", batch_size=args.batch)  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    hyps = t.translate_ids(src, t.alpha, "t2t", batch_size=args.batch)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    Path(args.result).write_text(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "hyps": hyps}))
    return 0


def timed(args, name: str, batch: int, tmp: Path) -> dict:
    out = tmp / "result.json"
    cmd = [sys.executable, __file__, "--worker", name, "--batch", str(batch), "--result", str(out),
           "--checkpoint", args.checkpoint, "--threads", str(args.threads), "--beam", str(args.beam),
           "--sentences", str(args.sentences)]
    for flag, value in (("--model", args.model), ("--src", args.src), ("--alpha", args.alpha)):
        if value is not None:
            cmd += [flag, str(value)]
    for ref in args.ref or []:
        cmd += ["--ref", ref]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a translation checkpoint or run directory")
    ap.add_argument("--model", help="its tmin export --ctranslate2 directory (default: exported to a temp folder)")
    ap.add_argument("--src", help="source file (default: the checkpoint's prepared test split)")
    ap.add_argument("--ref", action="append", help="reference file(s) of --src")
    ap.add_argument("--batches", default="1,32", help="batch sizes in sentences (default 1,32)")
    ap.add_argument("--threads", type=int, default=2, help="threads per engine (default 2)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=None, help="length penalty (default: decode.length_penalty)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=0, help="use the first N sentences (0: all)")
    ap.add_argument("--quick", action="store_true", help="64 sentences, one repetition")
    ap.add_argument("--precision", default="fp32",
                    help="precisions of ours to time, comma-separated: fp32 (always), int8, bf16, auto (default fp32)")
    ap.add_argument("--worker", choices=list(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.sentences, args.repeats = args.sentences or 64, 1
    try:
        names = ours_rows(args.precision)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        import ctranslate2  # noqa: F401

        names += ["ct2 fp32", "ct2 int8"]
    except ImportError:
        print("ctranslate2 is not installed (pip install -e '.[export]'): timing ours alone")
    tmp = Path(tempfile.mkdtemp(prefix="tmin_bench_"))
    if "ct2 fp32" in names and args.model is None:
        from transformer_min.translation.ct2_export import export_ctranslate2

        args.model = str(export_ctranslate2(args.checkpoint, tmp / "ct2"))
        print(f"exported to {args.model}")
    ours = translator(args, "ours")
    src, refs = test_set(args, ours)
    if args.sentences:
        src, refs = src[:args.sentences], [r[:args.sentences] for r in refs]
    batches = [int(b) for b in args.batches.split(",")]
    cpu = cpu_info()
    print(doctor_cpu_lines())
    print(f"CPU: {cpu.model} ({cpu.flags}), {cpu.cores} cores; torch {torch.__version__}, {args.threads} threads "
          "per engine")
    print(f"{len(src)} sentences, beam {ours.beam}, alpha {ours.alpha}, {args.repeats} interleaved repetitions, "
          "each timing in a fresh process\n")
    times: dict = {(n, b): [] for n in names for b in batches}
    cpu_times: dict = {(n, b): [] for n in names for b in batches}
    hyps: dict = {}
    for rep in range(args.repeats):
        for b in batches:
            for name in names[rep % len(names):] + names[:rep % len(names)]:  # rotate who goes first
                r = timed(args, name, b, tmp)
                times[name, b].append(r["seconds"])
                cpu_times[name, b].append(r["cpu_seconds"])
                hyps[name, b] = r["hyps"]
    print(f"{'engine':10s} {'batch':>5s} {'sent/s':>8s} {'tgt tok/s':>10s} {'same as ours':>12s} {'BLEU':>6s}")
    for b in batches:
        for name in names:
            sec = statistics.median(times[name, b])
            h = hyps[name, b]
            same = sum(x == y for x, y in zip(h, hyps["ours", b])) / len(h)
            bleu = score_refs(ours.tokenizer.decode(h), refs, ours.cfg.data.track)["bleu"]
            print(f"{name:10s} {b:5d} {len(src) / sec:8.2f} {sum(map(len, h)) / sec:10.0f} {same:12.1%} {bleu:6.2f}")
    print("\nin wall-clock time:")
    print_ratios(names, batches, times)
    print("\nin CPU time of each process (all its threads; on a loaded machine the steadier figure):")
    print_ratios(names, batches, cpu_times, "CPU time")
    return 0


def ours_rows(precisions: str) -> list[str]:
    """--precision -> the rows of ours ("ours" is fp32, always first); auto resolved from the CPU's capability,
    int8 refused where torch has no quantized engine (ConfigError)."""
    rows = ["ours"]
    for p in (x.strip() for x in precisions.split(",") if x.strip()):
        used = resolve_decode_precision(p, "--precision").used
        name = "ours" if used == "fp32" else f"ours {used}"
        if name not in rows:
            rows.append(name)
    return rows


def print_ratios(names: list[str], batches: list[int], times: dict, label: str = "") -> None:
    """Time ratios per batch size: ours / CTranslate2 fp32 and ours int8 / CTranslate2 int8 (issue 37's goal
    1.3 and bar 1.5), ours bf16 / CTranslate2 fp32, and each precision of ours against ours fp32. `label` ("CPU
    time") names the time measured when it is not the wall clock's."""
    def ratio(a: str, b: str, batch: int) -> float:
        return statistics.median(times[a, batch]) / statistics.median(times[b, batch])

    for b in batches:
        head = f"batch {b} ({label})" if label else f"batch {b}"
        bar = []
        if "ct2 fp32" in names:
            r = ratio("ours", "ct2 fp32", b)
            print(f"{head}: ours / CTranslate2 fp32 time = {r:.2f}  ({verdict(r)})")
            bar.append(f"fp32 {'PASS' if r <= BAR else 'MISS'}")
        if "ct2 int8" in names and "ours int8" in names:
            r = ratio("ours int8", "ct2 int8", b)
            print(f"{head}: ours int8 / CTranslate2 int8 time = {r:.2f}  ({verdict(r)})")
            bar.append(f"int8 {'PASS' if r <= BAR else 'MISS'}")
        if bar:
            print(f"{head}: the bar, ours / CTranslate2 <= {BAR}: {', '.join(bar)}")
        if "ct2 fp32" in names and "ours bf16" in names:
            print(f"{head}: ours bf16 / CTranslate2 fp32 time = {ratio('ours bf16', 'ct2 fp32', b):.2f}")
        for name in names[1:]:
            if name.startswith("ours "):
                print(f"{head}: {name} / ours fp32 time = {ratio(name, 'ours', b):.2f}")


if __name__ == "__main__":
    sys.exit(main())
