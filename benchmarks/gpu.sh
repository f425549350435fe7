#!/usr/bin/env bash
# The GPU benchmark in one short run (within 8 minutes on one CUDA GPU):
#   bash benchmarks/gpu.sh [--out DIR] [--checkpoint PATH]    # on a CUDA machine
#   bash benchmarks/gpu.sh --dry-run --out /tmp/gpu           # the CPU path at tiny sizes (CI)
# Keeps the full output in DIR/log and the figures in DIR/results.json.
#
# Table 3 retrained (issue 26) as one prepared command within 10 minutes on one H200:
#   bash benchmarks/gpu.sh --table3 [--out DIR] [--data-dir PATH] [other benchmarks/table3.py options]
# runs `benchmarks/table3.py --device cuda`: every row and seed at the GPU budget (1,456 updates of
# batch_tokens 3600, about 3,300 target tokens per update), 12 runs at once on the one GPU, one CPU thread
# each. It stops itself at 9 minutes (--time-limit 540: running runs checkpoint and stop; the same command
# in the same DIR goes on), then prints the table of what finished. DIR/table3/ keeps the results, configs
# and logs; the run folders (checkpoints, ~90 MB each) go to $TMPDIR/tmin_table3_runs, too big to bring back.
# Pass --data-dir where the Multi30k copy is on that machine (default: the base config's data.data_dir).
#
# The CPU benchmarks of issue 37 on that machine's CPU (another CPU class), as one prepared command:
#   bash benchmarks/gpu.sh --cpu-class --data-dir PATH [--out DIR]
# runs `benchmarks/cpu_class.py`: trains the Multi30k De->En model of docs/results.md (1,456 updates) on the GPU,
# then bench_train_step.py (fp32 and auto, 2 threads) and bench_translate.py (beam 4, 1 thread, ours fp32/int8/
# bf16 against CTranslate2, 300 sentences) on the CPU. The CPU parts took 470 s on a 2-core AMD EPYC (AVX-512) with
# an existing --checkpoint; the training on the GPU comes on top (not timed yet): pass --reps 2 --repeats 1 to fit a
# 10-minute call. Each part's log lands in DIR. Where the machine cannot fetch packages, carry wheels of
# ctranslate2, sacremoses and tomli_w and install them first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/gpu_bench
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONUNBUFFERED=1
mode=${1:-}
case "$mode" in --table3 | --cpu-class) shift ;; esac
[ "$mode" = "--cpu-class" ] && out=runs/cpu_class
rest=()  # the arguments but --out DIR
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
if [ "$mode" = "--table3" ]; then
  "$PY" benchmarks/table3.py --device cuda --results "$out/table3" --runs-dir "${TMPDIR:-/tmp}/tmin_table3_runs" \
    --jobs 12 --time-limit 540 --progress 30 ${rest[@]+"${rest[@]}"} 2>&1 | tee "$out/table3.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$mode" = "--cpu-class" ]; then
  "$PY" benchmarks/cpu_class.py --out "$out" ${rest[@]+"${rest[@]}"} 2>&1 | tee "$out/log"
  exit "${PIPESTATUS[0]}"
fi
"$PY" benchmarks/gpu_bench.py --out "$out" ${rest[@]+"${rest[@]}"} 2>&1 | tee "$out/log"
