"""Shared by the check tests: the registry by id, and running one check (on the paper's base config by
default). Every check passing on the base config is tested once, in test_registry.py; the per-module
tests add what only they can: broken variants that must FAIL, other configs."""

from __future__ import annotations

from transformer_min.verify.registry import Context, load_all, run_check

BY_ID = {c.id: c for c in load_all()}


def run(check_id: str, ctx: Context | None = None):
    return run_check(BY_ID[check_id], ctx or Context())
