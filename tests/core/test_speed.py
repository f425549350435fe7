"""core/speed.py: the int8 products' activation range decided from what the kernels do."""

from __future__ import annotations

import pytest
import torch

from transformer_min.core import speed


def _hot_product(engine: str, reduce_range: bool) -> float:
    """Largest error of `engine`'s dynamic int8 linear, relative to the fp32 product, on activations and weights
    that quantise to the top codes (random signs on a wide range, not the probe's own all-ones case)."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(16, 256, generator=g) * 4 - 2  # (16, 256) in [-2, 2]
    w = torch.randn(64, 256, generator=g).sign()  # (64, 256): every weight at +-127 once quantised
    y = torch.ops.quantized.linear_dynamic(x, speed.prepack(speed.int8_rows(w), None, engine), reduce_range)
    exact = x @ w.t()
    return ((y - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.parametrize("engine", ["onednn", "x86"])
def test_int8_sums_exact_says_whether_8_bit_activations_saturate(engine):
    """Where the probe says exact, 8-bit activations give an error of 8-bit rounding on a product whose pairs of
    u8 x s8 terms overflow 16 bits; where it says not, they give a much larger one and 7 bits bring it back; and the
    activation range each engine's products are called with follows it (x86 always 7 bits)."""
    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch build has no {engine} quantized engine")
    err8, err7 = _hot_product(engine, False), _hot_product(engine, True)
    assert err7 < 0.03, err7  # 7-bit activations: never saturate
    if speed.int8_sums_exact(engine):
        assert err8 < 0.02, err8
    else:
        assert err8 > 2 * err7 and err8 > 0.05, (err8, err7)
    want = engine == "x86" or not speed.int8_sums_exact(engine)
    assert speed.reduce_range(engine) is want
