"""Stage `arithmetic`: the paper's own numbers must agree with each other (sections 5.2 and 6.1, Table 2)."""

from __future__ import annotations

from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, register

STAGES = (Stage("arithmetic", "The paper's own arithmetic", "5.2, Table 2"),)

GPUS = 8
P100_FLOPS = 9.5e12  # Table 2 footnote: sustained single-precision TFLOPS of a P100


def _sig(x: float, digits: int = 2) -> float:
    """x rounded to `digits` significant figures (how the paper prints training costs)."""
    return float(f"{x:.{digits - 1}e}")


@register("arithmetic.training_time", "arithmetic", "5.2",
          "base: 0.4 s/step x 100k steps is about 12 hours; big: 1.0 s/step x 300k steps is 3.5 days",
          "ARITH", "transformer_min.verify.checks.arithmetic.training_time")
def training_time(ctx: Context) -> Result:
    base_h = 0.4 * 100_000 / 3600
    big_days = 1.0 * 300_000 / 86400
    ok = abs(base_h - 12) / 12 < 0.1 and round(big_days, 1) == 3.5
    return Result(ok, tr("base {base_h:.1f} h, big {big_days:.2f} days").format(base_h=base_h, big_days=big_days), tr("about 12 h (within 10%), 3.5 days"))


@register("arithmetic.training_cost_flops", "arithmetic", "Table 2",
          "training cost = time x GPUs x 9.5 TFLOPS: base 3.3e18, big 2.3e19 FLOPs", "ARITH",
          "transformer_min.verify.checks.arithmetic.training_cost")
def training_cost(ctx: Context) -> Result:
    base = 12 * 3600 * GPUS * P100_FLOPS
    big = 3.5 * 86400 * GPUS * P100_FLOPS
    ok = _sig(base) == 3.3e18 and _sig(big) == 2.3e19
    lines = [tr("base: 12 h x 3600 s x {gpus} GPUs x 9.5e12 = {flops}").format(gpus=GPUS, flops=f"{base:.4g}"),
             tr("big: 3.5 days x 86400 s x {gpus} GPUs x 9.5e12 = {flops}").format(gpus=GPUS, flops=f"{big:.4g}")]
    return Result(ok, tr("base {base:.3g}, big {big:.3g}").format(base=base, big=big), tr("3.3e18, 2.3e19 (to 2 significant figures)"), lines)
