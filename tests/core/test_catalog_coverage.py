"""Every user-facing error goes through the message catalog (issue 24): read from the source with ast.

A `raise X(...)` of `TminError` or one of its subclasses (found by ast in every module, not listed by hand)
whose message is a string literal, an f-string, or a `+` / `%` of them bypasses `tr()` and prints in English
under `--lang zh`. So does one raised through a factory parameter that defaults to such a class
(`def read_text_file(path, what, error=ConfigError)`). `tr("...")`, `tr("...").format(...)` or a variable
as the message pass (a variable cannot be judged here).
"""

from __future__ import annotations

import ast
from pathlib import Path

import transformer_min

PACKAGE = Path(transformer_min.__file__).resolve().parent
BASE = "TminError"


def parse_package(root: Path = PACKAGE) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in sorted(root.rglob("*.py"))}


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # errors.ConfigError
        return node.attr
    return None


def error_classes(trees) -> set[str]:
    """TminError and every class deriving from it, directly or not, in any of `trees` (to a fixed point)."""
    classes = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    found = {BASE}
    while True:
        more = {c.name for c in classes if c.name not in found and any(_base_name(b) in found for b in c.bases)}
        if not more:
            return found
        found |= more


def _is_tr(node: ast.expr) -> bool:
    """tr(...) or tr(...).format(...)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        node = node.func.value
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tr"


def _is_literal(node: ast.expr) -> bool:
    """A str constant, an f-string, or a `+` / `%` with one of them on either side."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_literal(node.left) or _is_literal(node.right)
    return False


def _factory_params(func: ast.FunctionDef | ast.AsyncFunctionDef, classes: set[str]) -> set[str]:
    """Parameters whose default is an error class: `error: type[ConfigError] = ConfigError`."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return {a.arg for a, d in pairs if _base_name(d) in classes}


def _raises(tree: ast.Module, classes: set[str]):
    """(raise node, its message node) of every raise of an error class or of a factory parameter."""
    scopes: list[tuple[ast.AST, set[str]]] = [(tree, set())]
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    scopes += [(f, _factory_params(f, classes)) for f in funcs]
    seen = set()
    for scope, params in reversed(scopes):  # the innermost function first: its parameters apply
        for node in ast.walk(scope):
            if not isinstance(node, ast.Raise) or id(node) in seen:
                continue
            seen.add(id(node))
            exc = node.exc
            if isinstance(exc, ast.Call) and exc.args:
                name = _base_name(exc.func)
                if name in classes or (isinstance(exc.func, ast.Name) and name in params):
                    yield node, exc.args[0]


def scan(trees: dict, classes: set[str]) -> tuple[list[str], int]:
    """(file:line of each untranslated message, how many messages go through tr)."""
    bad, translated = [], 0
    for path, tree in trees.items():
        for node, message in _raises(tree, classes):
            if _is_tr(message):
                translated += 1
            elif _is_literal(message):
                where = path.relative_to(PACKAGE.parent) if path.is_absolute() and PACKAGE.parent in path.parents \
                    else path
                bad.append((str(where), node.lineno, ast.unparse(message)[:100]))
    return [f"{where}:{line}: {text}" for where, line, text in sorted(bad)], translated


def test_every_user_error_message_goes_through_the_catalog():
    trees = parse_package()
    classes = error_classes(trees.values())
    assert {"ConfigError", "CheckpointError", "DataError", "ChannelError", "ModelInputError",
            "ChannelConfigError", "MissingKeyError", "ChannelRequestError", "ExploreInputError"} <= classes
    bad, translated = scan(trees, classes)
    assert not bad, "messages that bypass tr() (wrap them: tr(\"... {field} ...\").format(field=...)):\n" + \
        "\n".join(bad)
    assert translated > 100, translated  # the scan did find the package's raises


SNIPPET = '''
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr

class MyError(ConfigError):
    pass

class Deeper(MyError):
    pass

def plain(p):
    raise ConfigError(f"{p}: not found; fix: check the path")

def constant():
    raise Deeper("no such thing; fix: give another")

def joined(p):
    raise MyError("{}: bad".format(p) + "; fix: " + "this")

def percent(p):
    raise ConfigError("%s: bad" % p)

def factory(p, error: type[ConfigError] = ConfigError):
    raise error(f"{p}: empty")

def good(p, error=ConfigError):
    raise ConfigError(tr("{p}: not found; fix: check the path").format(p=p))
    raise Deeper(tr("no such thing"))
    raise error(tr("{p}: empty").format(p=p))

def unknowable(message):
    raise ConfigError(message)

def not_ours(p):
    raise ValueError(f"{p}: internal")
'''


def test_the_scanner_flags_a_literal_message_and_passes_tr():
    tree = ast.parse(SNIPPET)
    classes = error_classes([*parse_package(PACKAGE / "core").values(), tree])
    assert {"MyError", "Deeper"} <= classes
    bad, translated = scan({Path("snippet.py"): tree}, classes)
    assert [line.split(":")[1] for line in bad] == ["12", "15", "18", "21", "24"], bad
    assert translated == 3
