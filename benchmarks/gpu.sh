#!/usr/bin/env bash
# The GPU benchmark in one short run (within 8 minutes on one CUDA GPU):
#   bash benchmarks/gpu.sh [--out DIR] [--checkpoint PATH]    # on a CUDA machine
#   bash benchmarks/gpu.sh --dry-run --out /tmp/gpu           # the CPU path at tiny sizes (CI)
# Keeps the full output in DIR/log and the figures in DIR/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/gpu_bench
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "--out" ] && out="${args[$((i + 1))]}"
done
mkdir -p "$out"
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONUNBUFFERED=1
set -o pipefail
"$PY" benchmarks/gpu_bench.py "$@" 2>&1 | tee "$out/log"
