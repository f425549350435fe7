"""Stage `table3`: the parameter counts of Table 3, built row by row on the meta device.

The faithful model (PAPER.md): post-norm with no final LayerNorm, biases in W_Q, W_K, W_V, W_O and
both FFN layers, LayerNorm gain and bias, one shared V x d_model matrix for both embeddings and the
pre-softmax layer (no output bias), sinusoidal PE (no parameters). That is our default config.

Counting on the meta device allocates nothing, so even the big model costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from transformer_min.core.config import Config, ModelConfig, VocabConfig
from transformer_min.model.transformer import build_model, count_parameters
from transformer_min.verify.checks.full import paper_parameter_count
from transformer_min.core.i18n import tr
from transformer_min.verify.base import Context, Result, Stage, register
from transformer_min.verify.fixtures import full_model

STAGES = (Stage("table3", "Table 3 parameter counts", "Table 3"),)

V_PAPER = 37000  # section 5.1: "a shared source-target vocabulary of about 37000 tokens"
V_RELEASED = 40960  # the vocabulary size hard-coded in the code released with the paper
BIG_TOLERANCE = 1_500_000


@dataclass(frozen=True)
class Row:
    """One Table 3 row: the changes from base, the printed params (x10^6; None = blank), the exact count."""

    group: str
    label: str
    changes: dict = field(default_factory=dict)
    printed: int | None = None  # None: blank, i.e. the base value (65)
    exact_37000: int | None = None  # PAPER.md's exact count at V = 37000, where it gives one

    @property
    def name(self) -> str:
        return f"{self.group} {self.label}".strip()

    def model_config(self) -> ModelConfig:
        return ModelConfig(**self.changes)

    @property
    def paper_millions(self) -> int:
        return self.printed if self.printed is not None else 65

    @property
    def check_id(self) -> str:
        slug = self.label.replace(" ", "").replace("=", "").replace("_", "").replace(".", "") or "row"
        return f"table3.{self.group.lower()}_{slug.lower()}_params".replace("__", "_")


# Table 3 of the paper; `changes` are ModelConfig fields (blank cells keep the base value).
ROWS: list[Row] = [
    Row("base", "", {}, 65, 63_082_496),
    Row("A", "h=1", {"num_heads": 1}),
    Row("A", "h=4", {"num_heads": 4}),
    Row("A", "h=16", {"num_heads": 16}),
    Row("A", "h=32", {"num_heads": 32}),
    Row("B", "d_k=16", {"free_head_dims": True, "d_k": 16}, 58, 55_990_784),
    Row("B", "d_k=32", {"free_head_dims": True, "d_k": 32}, 60, 58_354_688),
    Row("C", "N=2", {"num_layers": 2}, 36, 33_656_832),
    Row("C", "N=4", {"num_layers": 4}, 50, 48_369_664),
    Row("C", "N=8", {"num_layers": 8}, 80, 77_795_328),
    Row("C", "d_model=256", {"d_model": 256}, 28, 26_834_944),
    Row("C", "d_model=1024", {"d_model": 1024}, 168, 163_889_152),
    Row("C", "d_ff=1024", {"d_ff": 1024}, 53, 50_487_296),
    Row("C", "d_ff=4096", {"d_ff": 4096}, 90, 88_272_896),
    Row("D", "P_drop=0.0", {"dropout": 0.0}),
    Row("D", "P_drop=0.2", {"dropout": 0.2}),
    Row("D", "eps_ls=0.0", {}),  # label smoothing is a training setting: same model
    Row("D", "eps_ls=0.2", {}),
    Row("E", "learned positions", {"positional": "learned"}),
    Row("big", "", {"d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3}, 213, 214_245_376),
]


def row(name: str) -> Row:
    return next(r for r in ROWS if r.name == name)


def count(model_cfg: ModelConfig, vocab: int) -> int:
    """Parameters of the model `model_cfg` with a shared vocabulary of `vocab`, built on the meta device."""
    with torch.device("meta"):
        model = build_model(Config(model=model_cfg, vocab=VocabConfig(src_size=vocab, tgt_size=vocab)))
    return count_parameters(model)


def formula(model_cfg: ModelConfig, vocab: int) -> int:
    m = model_cfg
    return paper_parameter_count(m.num_layers, m.d_model, m.d_ff, m.num_heads, m.head_dim_k, m.head_dim_v, vocab)


def counts(ctx: Context) -> dict[str, dict[int, int]]:
    """{row name: {V: count}} for V = 37000 and 40960 (memoised)."""
    return ctx.memo("table3.counts", lambda: {r.name: {v: count(r.model_config(), v) for v in (V_PAPER, V_RELEASED)}
                                              for r in ROWS})


def _exact_check(r: Row):
    """The check of one row's exact count at V = 37000."""
    def exact(ctx: Context) -> Result:
        got = counts(ctx)[r.name][V_PAPER]
        m = r.model_config()
        lines = [f"N {m.num_layers}, d_model {m.d_model}, d_ff {m.d_ff}, h {m.num_heads}, d_k {m.head_dim_k}, "
                 f"d_v {m.head_dim_v}, V {V_PAPER}; "
                 + tr("paper prints {printed}M (it counts V = {v})").format(printed=r.printed, v=V_RELEASED)]
        return Result(got == r.exact_37000, f"{got:,}", f"{r.exact_37000:,}", lines)
    exact.__name__ = exact.__qualname__ = r.check_id.split(".")[1]
    return register(r.check_id, "table3", "Table 3, 5.1",
                    f"Table 3 {r.name}: exactly {r.exact_37000:,} parameters at V = 37000 (faithful model)", "EXACT",
                    "transformer_min.model.transformer.build_model")(exact)


# One check per row the paper gives exactly (a tuple: the registry collects the checks inside it, in order).
EXACT_ROW_CHECKS = tuple(_exact_check(r) for r in ROWS if r.exact_37000 is not None)


@register("table3.every_row_matches_formula", "table3", "Table 3",
          "every Table 3 row built by build_model has the closed-form count N(3 P_att + 2 P_ffn + 10 d) + V d "
          "(row E: plus its learned position tables)", "ARITH",
          "transformer_min.model.transformer.build_model")
def every_row(ctx: Context) -> Result:
    bad, lines = [], []
    for r in ROWS:
        m = r.model_config()
        for v in (V_PAPER, V_RELEASED):
            want = formula(m, v) + (2 * m.max_len * m.d_model if m.positional == "learned" else 0)
            if counts(ctx)[r.name][v] != want:
                bad.append(f"{r.name} at V = {v}")
    n = len(ROWS) * 2
    return Result(not bad, tr("{n}/{n2} row/vocabulary pairs equal").format(n=n - len(bad), n2=n) + (tr("; differ: {bad}").format(bad=bad) if bad else ""),
                  tr("{n}/{n} equal").format(n=n), lines)


@register("table3.rounds_to_paper_at_40960", "table3", "Table 3",
          "at V = 40960 (the released code's vocabulary) every non-big row rounds to the paper's printed "
          "millions (blank = base = 65; row E excluded: the paper does not give its table size)", "ARITH",
          "transformer_min.model.transformer.build_model")
def rounds(ctx: Context) -> Result:
    bad, lines = [], []
    for r in ROWS:
        if r.group in ("big", "E"):
            continue
        got = counts(ctx)[r.name][V_RELEASED]
        ok = round(got / 1e6) == r.paper_millions
        lines.append(f"{r.name:20s} {got / 1e6:7.2f}M -> {round(got / 1e6):4d}   "
                     + tr("paper {millions}").format(millions=r.paper_millions))
        if not ok:
            bad.append(r.name)
    n = len(lines)
    return Result(not bad, tr("{n}/{n2} rows round to the printed value").format(n=n - len(bad), n2=n) + (tr("; not: {bad}").format(bad=bad) if bad else ""),
                  f"{n}/{n}", lines)


@register("table3.row_differences_match_paper", "table3", "Table 3",
          "differences between rows at d_model = 512 do not depend on V and match the paper's within 1M",
          "ARITH", "transformer_min.model.transformer.build_model")
def differences(ctx: Context) -> Result:
    c = counts(ctx)
    base = c["base"]
    worst, lines, v_free = 0.0, [], True
    for r in ROWS:
        if r.printed is None or r.name == "base" or r.model_config().d_model != 512:
            continue
        ours = [c[r.name][v] - base[v] for v in (V_PAPER, V_RELEASED)]
        v_free &= ours[0] == ours[1]
        paper = (r.printed - 65) * 1e6
        worst = max(worst, abs(ours[0] - paper))
        lines.append(tr("{name:12s} - base: ").format(name=r.name) + tr("ours {ours}M, paper {paper}M").format(
            ours=f"{ours[0] / 1e6:+7.2f}", paper=f"{paper / 1e6:+4.0f}"))
    return Result(v_free and worst <= 1e6, tr("same at both V: {v_free}; max |ours - paper| {worst:.2f}M").format(v_free=v_free, worst=worst / 1000000.0),
                  tr("True; <= 1M (the paper rounds to millions)"), lines)


@register("table3.big_row_within_tolerance", "table3", "Table 3",
          "big: |ours - 213M| <= 1.5M at V = 37000; the paper's big row is inconsistent with row C "
          "d_model = 1024 (d_ff 2048 -> 4096 adds 50,356,224, the paper shows +45M)", "ARITH",
          "transformer_min.model.transformer.build_model")
def big_row(ctx: Context) -> Result:
    c = counts(ctx)
    big, c1024 = c["big"][V_PAPER], c["C d_model=1024"][V_PAPER]
    step = big - c1024
    lines = [tr("big {big} vs C d_model=1024 {c1024}: difference {step} (only d_ff differs; h d_k is 1024 in both); "
                "the paper's 213 - 168 = 45M cannot hold with its own 168M").format(
                 big=f"{big:,}", c1024=f"{c1024:,}", step=f"{step:,}"),
             tr("at V = {v} big would be {millions}M").format(v=V_RELEASED,
                                                             millions=f"{c['big'][V_RELEASED] / 1e6:.2f}")]
    ok = abs(big - 213e6) <= BIG_TOLERANCE and step == 50_356_224
    return Result(ok, tr("{big:,} (|diff| {big2:.2f}M); big - C1024 = {step:,}").format(big=big, big2=abs(big - 213000000.0) / 1000000.0, step=step),
                  tr("|ours - 213M| <= 1.5M; big - C1024 = 50,356,224"), lines)


@register("table3.learned_positions_extra", "table3", "Table 3 E, 3.5",
          "row E (learned positional embedding) adds max_len x d_model parameters per table "
          "(two tables: source and target); sinusoids have none", "ARITH",
          "transformer_min.model.embeddings.LearnedPositionalEncoding")
def learned_extra(ctx: Context) -> Result:
    c = counts(ctx)
    m = row("E learned positions").model_config()
    extra = c["E learned positions"][V_PAPER] - c["base"][V_PAPER]
    want = 2 * m.max_len * m.d_model
    return Result(extra == want, f"+{extra:,}", f"+2 x max_len {m.max_len} x d_model {m.d_model} = {want:,}")


@register("table3.meta_count_equals_real", "table3", "Table 3",
          "counting on the meta device gives the same number as a real model (base row, V = 37000)", "ARCH",
          "transformer_min.model.transformer.count_parameters")
def meta_equals_real(ctx: Context) -> Result:
    cfg = ctx.cfg
    if cfg.model == ModelConfig() and cfg.vocab.src_size == cfg.vocab.tgt_size == V_PAPER:
        real = count_parameters(full_model(ctx))  # the real base model `full` built already
    else:
        real = count_parameters(build_model(Config(vocab=VocabConfig(src_size=V_PAPER, tgt_size=V_PAPER))))
    meta = counts(ctx)["base"][V_PAPER]
    return Result(real == meta, tr("meta {meta:,}, real {real:,}").format(meta=meta, real=real), tr("equal"))


@register("table3.torch_transformer_count", "table3", "3.1",
          "torch.nn.Transformer(512, 8, 6, 6, 2048) has 44,140,544 parameters: the faithful stacks' "
          "44,138,496 plus its two final LayerNorms", "ARITH",
          "torch.nn.Transformer")
def torch_transformer(ctx: Context) -> Result:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested-tensor notice for batch_first=False
        with torch.device("meta"):
            ref = torch.nn.Transformer(512, 8, 6, 6, 2048)
    theirs = count_parameters(ref)
    with torch.device("meta"):
        ours_model = build_model(Config(vocab=VocabConfig(src_size=3, tgt_size=3)))
    stacks = count_parameters(ours_model.encoder) + count_parameters(ours_model.decoder)
    ok = theirs == 44_140_544 and stacks == 44_138_496 and theirs - stacks == 2 * 2 * 512
    return Result(ok, tr("torch {theirs:,}; our stacks {stacks:,}; difference {theirs2:,}").format(theirs=theirs, stacks=stacks, theirs2=theirs - stacks),
                  tr("44,140,544; 44,138,496; 2,048 (2 LayerNorms x (gain + bias) x 512)"))
