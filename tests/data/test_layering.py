"""data/ sits below decoding, training and translation (docs/architecture.md): none of its modules imports them,
at module level or inside a function, and importing the data layer loads none of them."""

import subprocess
import sys
from pathlib import Path

import transformer_min
from tests.test_architecture import imports, layer_of, modules

ABOVE = ("transformer_min.decoding", "transformer_min.training", "transformer_min.translation", "transformer_min.channel",
         "transformer_min.verify", "transformer_min.viz", "transformer_min.report", "transformer_min.cli")


def data_imports() -> list[tuple[str, str, int]]:
    mods = modules()
    return [(name, target, line) for name, path in mods.items() if name.startswith("transformer_min.data")
            for target, _, line in imports(name, path, set(mods))]


def test_no_data_module_imports_a_higher_layer():
    found = data_imports()
    assert found, "the walker saw no import at all"
    upward = [f"{n}:{line} imports {t}" for n, t, line in found if t.startswith(ABOVE)]
    assert not upward, upward
    assert all(layer_of(t) <= layer_of("transformer_min.data") for _, t, _ in found)


def test_importing_the_data_layer_loads_neither_decoding_nor_training_nor_translation():
    names = [m for m in modules() if m.startswith("transformer_min.data")]
    code = (f"import importlib, sys\nfor m in {names!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('transformer_min.decoding', "
            "'transformer_min.training', 'transformer_min.translation'))))")
    src = str(Path(transformer_min.__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": src, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
