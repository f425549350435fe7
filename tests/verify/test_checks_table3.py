"""verify/checks/table3.py: Table 3 parameter counts, exact at V = 37000, rounded at V = 40960."""

from __future__ import annotations

import pytest
import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.transformer import build_model, count_parameters
from transformer_min.verify.checks import table3
from tests.verify.helpers import BY_ID
from transformer_min.verify.registry import Context, run_check



@pytest.fixture(scope="module")
def ctx() -> Context:
    return Context(Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2),
                          vocab=VocabConfig(src_size=50, tgt_size=50)))



def test_every_exact_row_has_a_check():
    exact = [r for r in table3.ROWS if r.exact_37000 is not None]
    assert len(exact) == 11
    assert {r.check_id for r in exact} <= set(BY_ID)
    assert "table3.base_row_params" in BY_ID and "table3.big_row_params" in BY_ID


def test_rows_cover_table_3():
    groups = [r.group for r in table3.ROWS]
    assert groups.count("A") == 4 and groups.count("B") == 2 and groups.count("C") == 7
    assert groups.count("D") == 4 and groups.count("E") == 1 and {"base", "big"} <= set(groups)
    assert table3.row("B d_k=16").model_config().head_dim_v == 64


def test_meta_count_equals_real_count_on_a_small_model():
    m = ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2)
    real = count_parameters(build_model(Config(model=m, vocab=VocabConfig(src_size=100, tgt_size=100))))
    assert table3.count(m, 100) == real == table3.formula(m, 100)


def test_an_output_bias_breaks_the_exact_counts(monkeypatch):
    """A generator bias (not in the paper) adds V parameters: every exact row must then fail."""
    real = table3.build_model

    def with_bias(cfg):
        model = real(cfg)
        model.generator.bias = torch.nn.Parameter(torch.zeros(cfg.vocab.tgt_size))
        return model

    monkeypatch.setattr(table3, "build_model", with_bias)
    ctx = Context()
    assert not run_check(BY_ID["table3.base_row_params"], ctx).passed
    assert not run_check(BY_ID["table3.every_row_matches_formula"], ctx).passed


def test_rounding_lines_list_every_non_big_non_e_row(ctx):
    o = run_check(BY_ID["table3.rounds_to_paper_at_40960"], ctx)
    assert len(o.result.lines) == len(table3.ROWS) - 2
    assert any(line.startswith("C d_ff=1024") and "52.51M" in line for line in o.result.lines)
