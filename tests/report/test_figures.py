"""core/figure.py and viz/heatmap.py: figures through matplotlib's object API, written atomically, with no
pyplot and no switch of the process-wide backend."""

from __future__ import annotations

import subprocess
import sys

import torch

PNG = b"\x89PNG\r\n\x1a\n"


def test_heatmap_writes_a_png_of_the_asked_size(tmp_path):
    from transformer_min.viz.heatmap import attention_heatmap

    w = torch.softmax(torch.randn(3, 4), dim=-1)  # (rows, cols)
    path = attention_heatmap(w, ["a", "b", "c", "d"], ["x", "y", "z"], tmp_path / "sub" / "h.png", title="t")
    data = path.read_bytes()
    assert data.startswith(PNG)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (4 * 110, 3 * 110)  # figsize (4, 3) inches at dpi 110 (tight_layout keeps the size)
    assert [p.name for p in path.parent.iterdir()] == ["h.png"]  # no temp file left behind


def test_drawing_leaves_pyplot_unloaded_and_the_backend_unchanged(tmp_path):
    """In a fresh interpreter with a non-Agg backend chosen, the report's figures and the heatmap neither load
    pyplot nor switch the backend."""
    code = (
        "import sys, matplotlib, torch; matplotlib.use('svg'); "
        "from transformer_min.report.figures import Artifacts, causal_mask; "
        "from transformer_min.viz.heatmap import attention_heatmap; "
        "f = causal_mask(Artifacts(), size=4); "
        f"attention_heatmap(torch.eye(3), ['a','b','c'], ['x','y','z'], {str(tmp_path / 'h.png')!r}); "
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules, f.png[:4] == b'\\x89PNG')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["svg", "False", "True"]
