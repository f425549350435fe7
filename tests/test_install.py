"""The Makefile's install step (issue 12): TORCH_INDEX_URL reaches pip for torch alone; the default
leaves pip's own index (which on these machines takes the local CPU wheel)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(repo_root, tmp_path, *extra) -> list[str]:
    proc = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *extra], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "pip install" in line]


def test_torch_index_is_passed_for_torch_alone(repo_root, tmp_path):
    lines = dry_run(repo_root, tmp_path, "TORCH_INDEX_URL=file:///opt/cpu-wheels")
    with_index = [line for line in lines if "--index-url file:///opt/cpu-wheels" in line]
    assert len(with_index) == 1 and "torch==2.13.0" in with_index[0] and "-c constraints.txt" in with_index[0]
    # the rest, the package with its channel extra (issue 24: `make demo` installs httpx): pip's default index
    assert any("-e '.[channel]'" in line and "--index-url" not in line for line in lines)


def test_default_install_uses_pips_own_index(repo_root, tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_INDEX_URL", raising=False)
    lines = dry_run(repo_root, tmp_path)
    assert any("torch==2.13.0" in line for line in lines)
    assert not any("--index-url" in line for line in lines)
