"""Table 3 (section 6.2) at small scale: the paper's rows with its scores, each row scaled to a small base.

Every variant changes what the paper's row changes, by the paper's ratio to its own base (d_model 512, h 8,
d_k 64, d_ff 2048, N 6, P_drop 0.1, eps_ls 0.1) applied to our base, where the base allows it; P_drop, eps_ls
and the positional encoding are set to the paper's values. `changes(variant, base)` computes the fields
from the base config, so a smaller base (the tests') scales the same way. The rows and their names are
those of `verify.checks.table3.ROWS`; PPL and BLEU are the paper's (newstest2013 dev, no averaging).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from transformer_min.core.config import Config, with_overrides
from transformer_min.core.errors import ConfigError
from transformer_min.core.i18n import tr

PAPER_BASE = {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8, "d_k": 64, "P_drop": 0.1, "eps_ls": 0.1}

# What a run may change besides its row's fields: the seed, the name, the budget, where it writes and reads.
BOOKKEEPING = ("train.seed", "train.name", "train.steps", "train.time_budget_minutes", "train.batch_tokens",
               "train.out_dir", "train.keep_last", "train.device", "train.precision", "data.data_dir",
               "train.loss_kernel")


@dataclass(frozen=True)
class Variant:
    """One Table 3 row: the paper's name and scores, and how its change maps to our base.

    `scale`: (field, Fraction) = base value x ratio, rounded (at least 1); (field, value) = set to value.
    """

    row: str
    slug: str
    ppl: float
    bleu: float
    scale: tuple = ()
    mapping: str = ""

    @property
    def group(self) -> str:
        return self.row.split(" ")[0]


def _v(row: str, slug: str, ppl: float, bleu: float, *scale, mapping: str = "") -> Variant:
    return Variant(row, slug, ppl, bleu, tuple(scale), mapping)


F = Fraction
VARIANTS: tuple[Variant, ...] = (
    _v("base", "base", 4.92, 25.8, mapping="the small base itself"),
    _v("A h=1", "A_h1", 5.29, 24.9, ("model.num_heads", F(1, 8)),
       mapping="h x1/8, at least 1: the single head (d_k = d_model)"),
    _v("A h=4", "A_h4", 5.00, 25.5, ("model.num_heads", F(1, 2)), mapping="h x1/2, d_k = d_model / h"),
    _v("A h=16", "A_h16", 4.91, 25.8, ("model.num_heads", F(2)), mapping="h x2, d_k = d_model / h"),
    _v("A h=32", "A_h32", 5.01, 25.4, ("model.num_heads", F(4)), mapping="h x4, d_k = d_model / h"),
    _v("B d_k=16", "B_dk16", 5.16, 25.1, ("model.free_head_dims", True), ("model.d_k", F(1, 4)),
       mapping="d_k x1/4 at fixed h (d_v stays)"),
    _v("B d_k=32", "B_dk32", 5.01, 25.4, ("model.free_head_dims", True), ("model.d_k", F(1, 2)),
       mapping="d_k x1/2 at fixed h (d_v stays)"),
    _v("C N=2", "C_N2", 6.11, 23.7, ("model.num_layers", F(1, 3)), mapping="N x1/3"),
    _v("C N=4", "C_N4", 5.19, 25.3, ("model.num_layers", F(2, 3)), mapping="N x2/3"),
    _v("C N=8", "C_N8", 4.88, 25.5, ("model.num_layers", F(4, 3)), mapping="N x4/3"),
    _v("C d_model=256", "C_d256", 5.75, 24.5, ("model.d_model", F(1, 2)),
       mapping="d_model x1/2, h fixed (d_k = d_v = d_model / h)"),
    _v("C d_model=1024", "C_d1024", 4.66, 26.0, ("model.d_model", F(2)),
       mapping="d_model x2, h fixed (d_k = d_v = d_model / h)"),
    _v("C d_ff=1024", "C_ff1024", 5.12, 25.4, ("model.d_ff", F(1, 2)), mapping="d_ff x1/2"),
    _v("C d_ff=4096", "C_ff4096", 4.75, 26.2, ("model.d_ff", F(2)), mapping="d_ff x2"),
    _v("D P_drop=0.0", "D_drop0", 5.77, 24.6, ("model.dropout", 0.0), mapping="P_drop = 0.0"),
    _v("D P_drop=0.2", "D_drop2", 4.95, 25.5, ("model.dropout", 0.2), mapping="P_drop = 0.2"),
    _v("D eps_ls=0.0", "D_ls0", 4.67, 25.3, ("train.label_smoothing", 0.0), mapping="eps_ls = 0.0"),
    _v("D eps_ls=0.2", "D_ls2", 5.47, 25.7, ("train.label_smoothing", 0.2), mapping="eps_ls = 0.2"),
    _v("E learned positions", "E_learned", 4.92, 25.7, ("model.positional", "learned"),
       mapping="learned positional embeddings instead of sinusoids"),
    _v("big", "big", 4.33, 26.4, ("model.d_model", F(2)), ("model.d_ff", F(2)), ("model.num_heads", F(2)),
       ("model.dropout", 0.3), mapping="d_model, d_ff and h x2 (d_k stays), P_drop = 0.3; the paper's 300K steps "
                                       "(x3) are not given: one budget for every run"),
)
BASE = VARIANTS[0]


def variant(name: str) -> Variant:
    """The variant by row name ("A h=1") or slug ("A_h1")."""
    for v in VARIANTS:
        if name in (v.row, v.slug):
            return v
    raise ConfigError(tr("Table 3: no row {name!r}; choose from {rows}").format(
        name=name, rows=", ".join(v.slug for v in VARIANTS)))


def get(cfg: Config, field: str):
    """cfg's value of "section.key"; model.d_k reads as the d_k in use (d_model / h when unset)."""
    section, key = field.split(".")
    if field == "model.d_k":
        return cfg.model.head_dim_k
    return getattr(getattr(cfg, section), key)


def changes(v: Variant, base: Config) -> dict:
    """{"section.key": value} of variant `v` on `base`: a ratio scales the base value (rounded, at least 1)."""
    out = {}
    for field, value in v.scale:
        if isinstance(value, Fraction):
            value = max(1, round(get(base, field) * value))
        out[field] = value
    return out


def apply(cfg: Config, values: dict) -> Config:
    """cfg with each "section.key" of `values` replaced, every section validated (`with_overrides`).

    A model change is applied to the whole [model] table at once, so that its own checks (h divides
    d_model, d_k with free_head_dims) see the final values."""
    by_section: dict[str, dict] = {}
    for field, value in values.items():
        section, key = field.split(".")
        by_section.setdefault(section, {})[key] = value
    for section, table in by_section.items():
        try:
            cfg = with_overrides(cfg, section, **table)
        except ConfigError as e:
            raise ConfigError(tr("Table 3: {error}; fix: choose a base config whose sizes allow this row").format(
                error=e)) from None
    return cfg


def derive(base: Config, v: Variant, bookkeeping: dict) -> Config:
    """The run's config: the base, the row's changes, then the seed / name / budget fields."""
    unknown = sorted(set(bookkeeping) - set(BOOKKEEPING))
    if unknown:
        raise ConfigError(tr("Table 3: {name} is not a bookkeeping field; allowed: {allowed}").format(
            name=unknown[0], allowed=", ".join(BOOKKEEPING)))
    return apply(apply(base, changes(v, base)), bookkeeping)


def differing(a: Config, b: Config) -> dict:
    """{"section.key": (a's value, b's value)} where two configs differ (the source file is not compared)."""
    out = {}
    for f in dataclasses.fields(a):
        if f.name in ("source", "taotoken", "origins"):
            continue
        x, y = dataclasses.asdict(getattr(a, f.name)), dataclasses.asdict(getattr(b, f.name))
        out.update({f"{f.name}.{k}": (x[k], y.get(k)) for k in x if x[k] != y.get(k)})
    return out
