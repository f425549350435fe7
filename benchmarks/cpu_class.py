"""Issue 37's CPU benchmarks on this machine's CPU, in one run: the CPU of a GPU machine is another CPU class, so
`benchmarks/gpu.sh --cpu-class` runs this there, beside the GPU benchmarks.

    bash benchmarks/gpu.sh --cpu-class --data-dir PATH [--out DIR]       # trains the model on the GPU first
    bash benchmarks/gpu.sh --cpu-class --checkpoint RUN_OR_CKPT [--out DIR]
    bash benchmarks/gpu.sh --cpu-class --dry-run --config tiny.toml --out /tmp/c   # tiny sizes, the CPU (CI)

1. `tmin doctor`'s CPU lines (the class: AVX2, AVX-512, AVX512_BF16, AMX).
2. The model: --checkpoint, else Multi30k De->En (--config) trained here for --steps updates (1,456: the models
   of docs/results.md, about 3,300 target tokens per update), on the GPU where there is one, and its last 5
   checkpoints averaged (section 6.1). --data-dir says where Multi30k's raw/ and tok/ are on this machine.
3. benchmarks/bench_train_step.py: ours against nn.Transformer, fp32 at d256 and d512, then --precision auto
   where this CPU has native bf16, with --threads torch threads (2: as the rows of docs/results.md).
4. benchmarks/bench_translate.py: beam 4, 1 thread, ours fp32 / int8 / bf16 (auto) against CTranslate2 fp32 and
   int8 where ctranslate2 is installed, at batch 1 and 32, on the test set's first --sentences sentences.
Each part's output goes to DIR/<part>.log (doctor, model, train_step, train_step_auto, translate) and to the
screen, so its figures can go into docs/results.md under this CPU's class with the date and commit. The model's
checkpoints stay under --runs-dir. A benchmark, not a test: exits 0 unless a part failed to run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # works without `pip install -e .`
TMIN = [sys.executable, "-m", "transformer_min"]


def run(part: str, cmd: list[str], log_path: Path, threads: int | None = None) -> None:
    """Run one part, its output to the screen and added to `log_path`; stop the run where it fails."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    print(f"\n== {part}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "a", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        proc.wait()
    print(f"== {part}: {time.perf_counter() - t0:.0f} s, exit {proc.returncode}", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"{part} failed (exit {proc.returncode}); its output: {log_path}")


def derived_config(a, out: Path) -> str:
    """--config with data.data_dir = --data-dir (where given) and train.out_dir = --runs-dir, written to
    DIR/config.toml: the one config of the data preparation, the training and the real batches of step 3."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from transformer_min.training.run_dir import to_toml

    data = tomllib.loads(Path(a.config).read_text(encoding="utf-8"))
    if a.data_dir:
        data.setdefault("data", {})["data_dir"] = str(Path(a.data_dir).resolve())
    data.setdefault("train", {})["out_dir"] = str(Path(a.runs_dir).resolve())
    path = out / "config.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    return str(path)


def train_model(config: str, steps: int, runs: Path, log: Path) -> str:
    """Train the model of step 2 under `runs` and average its last 5 checkpoints: the averaged checkpoint's path."""
    run("prepare", TMIN + ["data", "prepare", "--config", config], log)
    run("train", TMIN + ["train", "--config", config, "--name", "cpu_class", "--overwrite", "--steps", str(steps),
                         "--time-budget", "0"], log)
    run_dir = runs / "cpu_class"
    run("average", TMIN + ["average", str(run_dir), "--last", "5"], log)
    return str(run_dir / "checkpoints" / "averaged.safetensors")


def bench_steps(a, config: str, out: Path) -> None:
    """Step 3: the training step in fp32, then under precision auto where this CPU has native bf16 (elsewhere auto
    is fp32: the same row again, skipped)."""
    from transformer_min.core.hardware import cpu_info

    bench = [sys.executable, str(ROOT / "benchmarks" / "bench_train_step.py"), "--config", config]
    bench += ["--quick"] if a.dry_run else ["--reps", str(a.reps)]
    run("train_step", bench, out / "train_step.log", a.threads)
    if cpu_info().native_bf16:
        run("train_step_auto", bench + ["--precision", "auto"], out / "train_step_auto.log", a.threads)
    else:
        print("\n== train_step_auto: SKIP (no native bf16 on this CPU: precision auto is fp32, the row above)")


def main(argv=None) -> int:
    from transformer_min.cli.argtypes import positive_int  # 0 or a word: argparse's usage error naming the flag

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/cpu_class")
    ap.add_argument("--config", default="configs/multi30k_de_en.toml", help="the model's config (De->En)")
    ap.add_argument("--data-dir", help="Multi30k on this machine (the folder holding raw/ and tok/)")
    ap.add_argument("--checkpoint", help="a trained Multi30k checkpoint whose data path is valid here: no training")
    ap.add_argument("--runs-dir", default=os.path.join(tempfile.gettempdir(), "tmin_cpu_class_runs"),
                    help="where the model is trained (checkpoints: not in --out, whose files a device run brings back)")
    ap.add_argument("--steps", type=positive_int, default=1456, help="updates of the model trained here (default 1456)")
    ap.add_argument("--sentences", type=positive_int, default=300, help="test sentences for the decoding benchmark")
    ap.add_argument("--threads", type=positive_int, default=2, help="torch threads of the training-step benchmark")
    ap.add_argument("--reps", type=positive_int, default=3, help="interleaved repetitions of the training-step benchmark")
    ap.add_argument("--repeats", type=positive_int, default=2, help="interleaved repetitions of the decoding benchmark")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes: checks the script itself")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run("doctor", TMIN + ["doctor"], out / "doctor.log")
    config = derived_config(a, out)
    checkpoint = a.checkpoint or train_model(config, 20 if a.dry_run else a.steps, Path(a.runs_dir), out / "model.log")
    bench_steps(a, config, out)
    translate = [sys.executable, str(ROOT / "benchmarks" / "bench_translate.py"), "--checkpoint", checkpoint,
                 "--threads", "1", "--precision", "int8,auto", "--sentences", str(8 if a.dry_run else a.sentences),
                 "--repeats", str(1 if a.dry_run else a.repeats)]
    run("translate", translate + (["--batches", "1,4"] if a.dry_run else []), out / "translate.log")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; logs in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
