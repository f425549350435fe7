"""The package's layer diagram (docs/architecture.md), checked on the source with ast.

Every import of a transformer_min module, at module level or inside a function, is an edge. The test fails on
- an edge to a package in a higher layer than the importer's (dependencies point one way, downwards);
- a private name (`_x`) imported from another module;
- a cycle between modules.
There is no exemption list.
"""

from __future__ import annotations

import ast
from pathlib import Path

import transformer_min

PACKAGE = Path(transformer_min.__file__).resolve().parent

# Bottom to top; a module may import from its own layer's package and from the layers below it.
LAYERS = ["core", "model", "data", "decoding", "training", "translation", "channel", "verify", "viz", "report",
          "cli"]
TOP_LEVEL = {"__init__": -1, "__main__": len(LAYERS)}  # the version string; `python -m transformer_min`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, str, int]]:
    """(target module, imported name or "", line) for every transformer_min import in one file."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names if a.name.startswith("transformer_min")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = base[: len(base) - node.level + 1]
                target = ".".join(stem + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("transformer_min"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, "", node.lineno) if sub in known else (target, alias.name, node.lineno))
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LEVEL["__init__"]
    if parts[1] in TOP_LEVEL:
        return TOP_LEVEL[parts[1]]
    assert parts[1] in LAYERS, f"{module}: a top-level name that is in no layer; add it to the diagram"
    return LAYERS.index(parts[1])


def graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    problems = []
    for name, path in mods.items():
        for target, imported, line in imports(name, path, set(mods)):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if target not in mods:
                problems.append(f"{where}: imports {target}, which does not exist")
                continue
            if target != name:
                edges[name].add(target)
            if layer_of(target) > layer_of(name):
                problems.append(f"{where}: {name} (layer {layer_of(name)}) imports {target} "
                                f"(layer {layer_of(target)}), a higher layer")
            if imported.startswith("_") and not imported.endswith("__") and target != name:
                problems.append(f"{where}: {name} imports the private name {imported} from {target}")
    return edges, problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), plus self-loops."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_import_points_down_the_layers_and_no_private_name_crosses_a_module():
    _, problems = graph()
    assert not problems, "\n".join(problems)


def test_no_cycle_between_modules():
    found = cycles(graph()[0])
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_between_top_level_packages():
    edges, _ = graph()
    top = {}
    for a, targets in edges.items():
        for b in targets:
            pa, pb = (m.split(".")[1] if "." in m else "" for m in (a, b))
            if pa != pb:
                top.setdefault(pa, set()).add(pb)
                top.setdefault(pb, set())
    assert not cycles(top), cycles(top)


def test_the_walker_sees_upward_edges_and_cycles(tmp_path):
    """The checks above can fail: a made-up upward edge and a made-up cycle are found."""
    edges = {"transformer_min.core.a": {"transformer_min.cli.b"}, "transformer_min.cli.b": {"transformer_min.core.a"}}
    assert cycles(edges) == [["transformer_min.cli.b", "transformer_min.core.a"]]
    assert layer_of("transformer_min.cli.b") > layer_of("transformer_min.core.a")
    src = tmp_path / "x.py"
    src.write_text("from transformer_min.cli.main import _private\nfrom ..core import io\n")
    found = imports("transformer_min.model.x", src, {"transformer_min.core.io"})
    assert ("transformer_min.cli.main", "_private", 1) in found and ("transformer_min.core.io", "", 2) in found


def test_the_diagram_in_the_docs_names_every_layer_in_order():
    doc = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    positions = [doc.find(f"`{layer}`") for layer in LAYERS]
    assert all(p >= 0 for p in positions), [layer for layer, p in zip(LAYERS, positions) if p < 0]
    assert positions == sorted(positions), "docs/architecture.md lists the layers out of order"


INFERENCE_PACKAGES = ("decoding", "translation", "viz", "report")  # they read checkpoints, never train
TRAINING_ONLY = ("transformer_min.training.checkpoint", "transformer_min.training")


def inference_imports_of_training(edges: dict[str, set[str]]) -> list[str]:
    """Edges from an inference package to training's checkpoint module (or the training package itself)."""
    return [f"{a} imports {b}" for a, targets in sorted(edges.items()) for b in sorted(targets)
            if a.split(".")[1:2] and a.split(".")[1] in INFERENCE_PACKAGES and b in TRAINING_ONLY]


def test_no_inference_module_reads_checkpoints_through_training():
    """Issue 23: translation, export, explore and report read a checkpoint with model/saved.py, below
    training; training/checkpoint.py only writes them (saving, pruning, RNG state)."""
    found = inference_imports_of_training(graph()[0])
    assert not found, "\n".join(found)
    made_up = {"transformer_min.translation.x": {"transformer_min.training.checkpoint"}}
    assert inference_imports_of_training(made_up) == ["transformer_min.translation.x imports "
                                                      "transformer_min.training.checkpoint"]  # the rule can fail


def test_core_knows_neither_the_channel_nor_the_command_line():
    """core/ is below every layer: the channel declares its own section (channel/schema.py) and hands it to the
    loader, and argparse types and --flag helpers live in cli/. So no core module names the channel's section
    or imports argparse."""
    found = []
    for p in sorted((PACKAGE / "core").rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        tree = ast.parse(text)
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        if "argparse" in names:
            found.append(f"{p.name}: imports argparse")
        if "taotoken" in text.lower():
            found.append(f"{p.name}: names the channel's section")
    assert not found, found


MAX_FILE_LINES, MAX_FUNCTION_LINES = 300, 50


def test_no_file_over_300_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert not long, long


def test_no_function_over_50_lines():
    """Counted from the `def` line to the last line of the body, docstring and decorators' targets included."""
    long = {}
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"] = n
    assert not long, long
