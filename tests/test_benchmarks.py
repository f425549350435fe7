"""benchmarks/: the attention benchmark runs end to end (a smoke test; no timing assertions)."""

from __future__ import annotations

import re
import subprocess
import sys


def test_bench_attention_quick(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_attention.py", "--quick"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ours/torch" in out and "torch peak MiB" in out
    for mode in ("forward", "fwd+bwd"):
        for length in (32, 128):
            row = re.search(rf"^{re.escape(mode)}\s+{length}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+<=[\d.]+\s+(PASS|MISS)",
                            out, flags=re.M)
            assert row, f"no {mode} L={length} row in:\n{out}"
            ours, theirs, ratio = (float(v) for v in row.groups()[:3])
            assert abs(ratio - ours / theirs) < 0.011  # the ratio column is ours / torch
    assert re.search(r"^\d+ of 4 rows miss the goal", out, flags=re.M)


def test_bench_attention_rejects_unknown_mode(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_attention.py", "--modes", "sideways"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown mode 'sideways'" in proc.stderr


def test_bench_decode_quick(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_decode.py", "--quick"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "identical outputs: True" in proc.stdout
    cached = re.search(r"^KV cache \(incremental\)\s+([\d.]+)\s+([\d.]+)", proc.stdout, flags=re.M)
    full = re.search(r"^full prefix every step\s+([\d.]+)\s+([\d.]+)", proc.stdout, flags=re.M)
    speed = re.search(r"speedup \(uncached / cached\): ([\d.]+)x", proc.stdout)
    assert cached and full and speed
    assert abs(float(speed.group(1)) - float(full.group(1)) / float(cached.group(1))) < 0.5
