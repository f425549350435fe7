"""verify/registry.py: every registered check passes on the paper's base config, and the checks
really catch the bugs they exist for (a doubled PE exponent, a causal mask shifted by one)."""

from __future__ import annotations

import importlib

import pytest
import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.verify.registry import STAGES, Context, load_all, run_check

CHECKS = load_all()
TAGS = {"EXACT", "STAT", "ARCH", "ARITH"}


@pytest.fixture(scope="module")
def ctx() -> Context:
    """One Context for the whole module, so memoised setups (the base model) are built once."""
    return Context(Config())


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check_passes_on_paper_defaults(check, ctx):
    outcome = run_check(check, ctx)
    detail = outcome.error or f"measured {outcome.result.measured}; expected {outcome.result.expected}"
    assert outcome.passed, f"{check.id} ({check.section}): {check.claim} -- {detail}"


def resolve(dotted: str):
    """Import the longest importable module prefix of `dotted`, then getattr along the rest."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check_metadata(check):
    assert check.section.strip(), "a check names its paper section"
    assert check.claim.strip(), "a check states its claim"
    assert check.tag in TAGS
    assert check.stage in STAGES
    assert check.id.startswith(f"{check.stage}."), "ids are <stage>.<name>"
    assert callable(resolve(check.code)), f"{check.code!r} does not resolve to a function or class"


def test_registry_ids_unique_and_stages_declared():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    assert {"attention", "multihead", "positional", "encoder", "decoder", "full", "scaling"} <= set(STAGES)
    assert all(any(c.stage == s for c in CHECKS) for s in ("positional", "decoder", "full"))


# ------------------------------------------------------------------------------------------------
# The checks catch deliberately broken code
# ------------------------------------------------------------------------------------------------

def tiny_context() -> Context:
    """A fresh Context (nothing memoised) at tiny sizes, so the broken runs stay quick."""
    return Context(Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0),
                          vocab=VocabConfig(src_size=50, tgt_size=50)))


def outcomes(ids: list[str], ctx: Context) -> dict[str, bool]:
    by_id = {c.id: c for c in CHECKS}
    return {i: run_check(by_id[i], ctx).passed for i in ids}


def doubled_exponent_table(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The classic bug: 10000^(2*i/d_model) where i already steps 0, 2, 4, ..."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, 2 * i / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


POSITIONAL_CATCHERS = ["positional.test_vectors", "positional.matches_numpy_formula",
                       "positional.relative_rotation", "positional.wavelengths"]


def test_positional_checks_pass_then_fail_on_doubled_exponent(monkeypatch):
    assert all(outcomes(POSITIONAL_CATCHERS, tiny_context()).values())
    monkeypatch.setattr("transformer_min.model.embeddings.sinusoidal_table", doubled_exponent_table)
    failed = outcomes(POSITIONAL_CATCHERS, tiny_context())
    assert not any(failed.values()), f"checks that missed the doubled exponent: {failed}"


@pytest.mark.parametrize("diagonal,catchers", [
    (1, ["decoder.causal_weights_zero_above_diagonal", "full.causality"]),
    # tril(-1) hides the diagonal: it leaks nothing from the future, so full.causality (which tests for
    # leaks) rightly passes -- token j still reaches position j through the residual path. The
    # diagonal > 0 part of the decoder check is what catches it.
    (-1, ["decoder.causal_weights_zero_above_diagonal"]),
], ids=["sees-one-future-token", "misses-itself"])
def test_causal_checks_fail_on_shifted_mask(monkeypatch, diagonal, catchers):
    assert all(outcomes(catchers, tiny_context()).values())

    def shifted(size, device=None):
        return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal)

    monkeypatch.setattr("transformer_min.model.masks.causal_mask", shifted)
    failed = outcomes(catchers, tiny_context())
    assert not any(failed.values()), f"checks that missed causal_mask = tril({diagonal}): {failed}"
