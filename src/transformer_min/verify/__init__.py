"""Verification of the paper's claims, stage by stage (`tmin verify`, `tmin report`, pytest)."""

from transformer_min.verify.registry import STAGES, Check, Context, Result, checks_for, load_all, run_check

__all__ = ["STAGES", "Check", "Context", "Result", "checks_for", "load_all", "run_check"]
