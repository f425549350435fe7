"""verify/registry.py loads the checks from the explicit CHECK_MODULES list, in that order, and importing a
check module registers nothing by itself."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from transformer_min.verify import registry
from transformer_min.verify.base import Context, Result, Stage, register


def fake_module(name: str, stages: tuple[Stage, ...], ids: list[tuple[str, str]]) -> types.ModuleType:
    """A module object holding `register`-marked functions (id, stage) defined in the order given."""
    module = types.ModuleType(name)
    module.STAGES = stages
    for check_id, stage in ids:
        def func(ctx: Context) -> Result:
            return Result(True, "", "")
        func.__module__ = name
        setattr(module, check_id.replace(".", "_"), register(check_id, stage, "3", "a claim", "ARCH", "x.y")(func))
    return module


def test_stages_and_checks_follow_the_module_order():
    a = fake_module("fake.a", (Stage("a1", "A1", "3.1"), Stage("a2", "A2", "3.2")), [("a2.x", "a2"), ("a1.y", "a1")])
    b = fake_module("fake.b", (Stage("b", "B", "4"),), [("b.z", "b")])
    forward, backward = registry.collect([a, b]), registry.collect([b, a])
    assert list(forward.stages) == ["a1", "a2", "b"] and list(backward.stages) == ["b", "a1", "a2"]
    assert [c.id for c in forward.checks] == ["a2.x", "a1.y", "b.z"]  # definition order inside a module
    assert forward.stages["a2"] == ("A2", "3.2")


def test_a_duplicate_id_or_an_undeclared_stage_is_an_error():
    a = fake_module("fake.a", (Stage("a", "A", "3"),), [("a.x", "a")])
    twice = fake_module("fake.c", (Stage("c", "C", "3"),), [("a.x", "c")])
    with pytest.raises(ValueError, match="registered twice"):
        registry.collect([a, twice])
    stray = fake_module("fake.d", (), [("d.x", "nowhere")])
    with pytest.raises(ValueError, match="unknown stage 'nowhere'"):
        registry.collect([stray])


def test_a_check_imported_from_another_module_is_not_counted_twice():
    a = fake_module("fake.a", (Stage("a", "A", "3"),), [("a.x", "a")])
    b = fake_module("fake.b", (Stage("b", "B", "4"),), [])
    b.borrowed = a.a_x  # `from fake.a import a_x` in module b
    assert [c.id for c in registry.collect([a, b]).checks] == ["a.x"]


def test_the_registry_is_exactly_the_listed_modules_in_order():
    names = [m.rsplit(".", 1)[1] for m in dict.fromkeys(c.func.__module__ for c in registry.load_all())]
    assert names == list(registry.CHECK_MODULES)
    assert list(registry.STAGES)[:8] == ["attention", "multihead", "positional", "position_variants", "encoder",
                                         "decoder", "full", "scaling"]


def test_importing_the_checks_package_or_one_module_registers_nothing():
    """A fresh interpreter: the package __init__ imports no check module; importing one check module does not
    load the registry's catalog (only an explicit load_all does)."""
    code = ("import sys; import transformer_min.verify.checks; "
            "print(sorted(m for m in sys.modules if m.startswith('transformer_min.verify.checks.'))); "
            "import transformer_min.verify.checks.scaling; from transformer_min.verify import registry; "
            "print(registry.catalog.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "0"
