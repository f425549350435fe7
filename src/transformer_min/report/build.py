"""Build the report: run every registered check, add the measured tables and figures, write the files.

    report.html   self-contained (figures embedded as base64 PNG), a contents list, PASS/FAIL coloured
    report.md     the same tables, figures linked
    figures/*.png and data/*.csv (every figure's data, and claims.csv)
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from transformer_min.core.config import Config
from transformer_min.core.i18n import claim, tr
from transformer_min.core.io import atomic_write_bytes
from transformer_min.model.saved import load_model
from transformer_min.report import deviations, experiments, figures, render
from transformer_min.report import table1 as table1_section
from transformer_min.report import table3 as table3_section
from transformer_min.report import table3_retrained
from transformer_min.report.table3_measured import Sweep
from transformer_min.report.render import Heading, Section, Table, Text
from transformer_min.verify.registry import STAGES, Context, Outcome, checks_for, load_all, run_check
from transformer_min.verify.summary import Summary, summarize

log = logging.getLogger(__name__)

TITLE = "Attention Is All You Need, checked claim by claim"


@dataclass
class ReportResult:
    outcomes: list[Outcome]
    out_dir: Path
    files: list[Path]
    seconds: float

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def skipped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.skipped]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def summary(self) -> Summary:
        """The one count of the claims (the terminal line, report.md and report.html all print it)."""
        return summarize(self.outcomes)


def run_claims(ctx: Context, stages: list[str] | None = None) -> list[Outcome]:
    """Every registered check, stage by stage in registry order (the same order as `tmin verify`)."""
    load_all()
    outcomes = []
    for name in [s for s in STAGES if not stages or s in stages]:
        for check in checks_for([name]):
            o = run_check(check, ctx)
            log.debug("%s %s (%.2fs)", o.verdict, check.id, o.seconds)
            outcomes.append(o)
    return outcomes


def _status(o: Outcome) -> str:
    return o.verdict  # PASS, FAIL or SKIP: a check that did not run is never a pass


def claims_section(outcomes: list[Outcome], art: figures.Artifacts) -> Section:
    blocks: list = [Text(tr("One row per registered check (`transformer_min.verify.checks`): the paper's section or "
                         "equation, the claim in one line, the code that implements it, what was measured, what the "
                         "paper (or PAPER.md) expects, and the verdict. In the HTML, click a claim for the check's "
                         "printout. Tags: EXACT (exact or to float tolerance), STAT (sampled, with a tolerance), "
                         "ARCH (structure, masking, causality), ARITH (the paper's numbers against each other). "
                         "`tmin verify` and pytest run the same registry."))]
    failed = [o for o in outcomes if o.failed]
    if failed:
        blocks.append(Table(["failed check", "section", "error or measured", "expected"],
                            [[o.check.id, o.check.section, o.error or o.result.measured, o.result.expected]
                             for o in failed], caption=tr("Failures")))
    by_stage: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_stage.setdefault(o.check.stage, []).append(o)
    for stage, group in by_stage.items():
        title, section = STAGES[stage]
        counts = summarize(group)
        heading = tr("{title} (section {section}): {ok}/{n} PASS").format(
            title=tr(title), section=section, ok=len(counts.passed), n=counts.total)
        if counts.skipped:
            heading += tr(", {skipped} SKIP").format(skipped=len(counts.skipped)) if counts.passed or counts.failed \
                else tr(", every check skipped")
        blocks.append(Heading(heading, id=f"stage-{stage}"))
        rows, details = [], []
        for o in group:
            c = o.check
            measured = o.error if o.error else o.result.measured
            rows.append([c.section, claim(c.claim), c.code, measured, o.result.expected, c.tag, tr(_status(o)), c.id])
            details.append(list(o.result.lines))
        blocks.append(Table(["section", "claim", "code", "measured", "expected", "tag", "result", "check"], rows,
                            status_col=6, details=details, details_col=1))
    data = art.csv("claims.csv", ["id", "stage", "section", "tag", "claim", "code", "measured", "expected", "result",
                                  "seconds"],
                   ([o.check.id, o.check.stage, o.check.section, o.check.tag, o.check.claim, o.check.code,
                     o.error or o.result.measured, o.result.expected, _status(o), round(o.seconds, 4)]
                    for o in outcomes))
    blocks.append(Text(tr("All rows: {file}.").format(file=f"`data/{data}`")))
    return Section("claims", "Claims", blocks)


def figures_section(art: figures.Artifacts, quick: bool) -> Section:
    blocks = [Heading(tr("Positional encoding (3.5)"))] + figures.positional(art)
    blocks += [Heading(tr("Learning rate, eq. (3) (5.3)")), figures.schedule(art, every=50 if quick else 10)]
    blocks += [Heading(tr("Why 1/sqrt(d_k) (3.2.1)")),
               figures.softmax_scaling(art, rows=300 if quick else 2000, max_log2=10)]
    blocks += [Heading(tr("The causal mask (3.2.3)")), figures.causal_mask(art)]
    blocks += [Heading(tr("Label smoothing (5.4)")), figures.label_smoothing(art)]
    return Section("figures", "Figures", blocks)


def _sample(cfg: Config, task: str) -> tuple[torch.Tensor, torch.Tensor, list[str], list[str], list[int]]:
    """For copy/reverse: tokens 3..10 (vocabulary 11; BOS 1, EOS 2, PAD 0); otherwise 10 random ids, fed
    back as the decoder input (there is no reference translation for them)."""
    v = cfg.vocab
    if task in ("copy", "reverse"):
        tokens = list(range(3, 11))
    else:
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(max(v.pad_id, v.bos_id, v.eos_id) + 1, v.src_size, (10,), generator=g).tolist()
    expected = list(reversed(tokens)) if task == "reverse" else list(tokens)
    src = torch.tensor([tokens + [v.eos_id]])
    tgt = torch.tensor([[v.bos_id] + expected])
    return src, tgt, [str(t) for t in tokens] + ["EOS"], ["BOS"] + [str(t) for t in expected], expected


def attention_section(art: figures.Artifacts, ctx: Context, checkpoint: str | None) -> Section:
    blocks: list = []
    if checkpoint:
        model, ccfg = load_model(checkpoint)
        task = ccfg.train.task
        src, tgt, src_labels, tgt_labels, expected = _sample(ccfg, task)
        with torch.no_grad():
            _, att = model(src, tgt, return_attention=True)
        note = tr("Trained model from `{checkpoint}` (task {task}).").format(checkpoint=checkpoint, task=task)
        synthetic = task in ("copy", "reverse")
        blocks.append(Text(tr("{note} Sample: source {source}, decoder input {target} {why}").format(
            note=note, source=src_labels, target=tgt_labels,
            why=tr("(the expected output shifted right).") if synthetic else tr("(random ids: no reference)."))))
        if synthetic:
            blocks += _decode_lines(model, ccfg, src, expected)
        if task == "reverse":
            cross = att.cross[-1][0].mean(0)[: len(expected)]  # (T, S), head average, output tokens only
            n = len(expected)
            mirrored = sum(cross[i, n - 1 - i].item() for i in range(n)) / n
            blocks.append(Text(tr("Reverse task: output token i must read source position n-1-i. The last layer's "
                                  "cross-attention (head average) puts {share:.2f} of its weight there on average "
                                  "(the anti-diagonal).").format(share=mirrored)))
        layers = list(range(len(att.cross))) if len(att.cross) <= 3 else None
    else:
        from transformer_min.verify.fixtures import full_batch, full_model

        model = full_model(ctx)
        src, tgt = (t[:1, :12] for t in full_batch(ctx))
        with torch.no_grad():
            _, att = model(src, tgt, return_attention=True)
        src_labels, tgt_labels = [str(t) for t in src[0].tolist()], [str(t) for t in tgt[0].tolist()]
        note = tr("Untrained: the [model] config with seeded random weights, on random token ids; run "
                  "`tmin report --checkpoint PATH` for a trained model.")
        blocks.append(Text(note))
        layers = None
    blocks += figures.attention(art, att, src_labels, tgt_labels, note, layers)
    return Section("attention", "Attention heatmaps", blocks)


def _decode_lines(model, cfg: Config, src: torch.Tensor, expected: list[int]) -> list:
    try:
        from transformer_min.decoding import search as decoding
    except ImportError:  # decoding not installed: the heatmaps do not need it
        return []
    v = cfg.vocab
    with torch.no_grad():
        out = decoding.strip(decoding.greedy_decode(model, src, v.bos_id, v.eos_id, v.pad_id), v.eos_id, v.pad_id)[0]
    return [Text(tr("Greedy decoding of the sample: {out} (expected {expected}: {verdict}).").format(
        out=out, expected=expected, verdict=tr("correct") if out == expected else tr("different")))]


def summary_section(cfg: Config, outcomes: list[Outcome], quick: bool, stages: list[str] | None,
                    checkpoint: str | None, seconds: float) -> Section:
    by_tag = {tag: summarize(o for o in outcomes if o.check.tag == tag) for tag in {o.check.tag for o in outcomes}}
    rows = [[tag, str(len(s.passed)), str(len(s.failed)), str(len(s.skipped))] for tag, s in sorted(by_tag.items())]
    m = cfg.model
    return Section("summary", "Summary", [
        Text(summarize(outcomes).claims_line()),
        Table(["tag", "PASS", "FAIL", "SKIP"], rows),
        Table(["", ""], [
            [tr("config"), cfg.source],
            [tr("model"), f"N {m.num_layers}, d_model {m.d_model}, h {m.num_heads}, d_ff {m.d_ff}, norm {m.norm}, "
                      f"positional {m.positional}, tying {m.weight_tying}"],
            [tr("mode"), (tr("quick") if quick else tr("full"))
             + (tr(", stages {stages} only").format(stages=", ".join(stages)) if stages else "")],
            [tr("checkpoint"), checkpoint or tr("none (heatmaps from an untrained model)")],
            [tr("built"), tr("{when} in {seconds} s").format(
                when=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), seconds=f"{seconds:.0f}")],
            [tr("software"), f"torch {importlib.metadata.version('torch')}, "
                         f"Python {'.'.join(map(str, sys.version_info[:3]))}, {torch.get_num_threads()} CPU thread(s)"],
        ]),
    ])


def deviations_section() -> Section:
    return Section("deviations", "Deviations from the paper", [
        Text(tr("Every place the code departs from the paper (opt-in; the defaults are the paper's) or fills a gap "
                "the paper leaves, with the config switch that controls it. The same table is docs/deviations.md, "
                "generated from `transformer_min.report.deviations`.")),
        # the cells in the report's language (docs/deviations.md stays English; a cell without a translation,
        # a key name or a value, stays as written)
        Table(deviations.HEADERS, [[tr(c) if c else c for c in row] for row in deviations.rows()]),
    ])


def table3_block(art: figures.Artifacts, ctx: Context, table3: Sweep | None) -> Section:
    """Table 3's exact parameter counts, and with `table3` (a sweep of benchmarks/table3.py) the rows retrained."""
    if not table3:
        return Section("table3", "Table 3: parameter counts", table3_section.section(art, ctx))
    return Section("table3", "Table 3: parameter counts, and retrained at small scale",
                   table3_section.section(art, ctx) + table3_retrained.section(art, table3))


def build_report(cfg: Config, out_dir: str | Path, quick: bool = False, checkpoint: str | None = None,
                 stages: list[str] | None = None, table3: Sweep | None = None) -> ReportResult:
    """Run the claims and write the report into out_dir. `stages`: only those stages' claims, no
    measured sections (a partial report). `table3`: finished runs of benchmarks/table3.py
    (`report.table3_measured.load_sweep`), added to the Table 3 section."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    ctx = Context(cfg)
    art = figures.Artifacts()
    outcomes = run_claims(ctx, stages)
    log.info(tr("claims: %d run in %.1f s"), len(outcomes), time.perf_counter() - t0)
    sections = [claims_section(outcomes, art)]
    if not stages:
        for make in (lambda: table3_block(art, ctx, table3),
                     lambda: Section("table1", "Table 1: why self-attention, measured",
                                     table1_section.section(art, quick)),
                     lambda: figures_section(art, quick),
                     lambda: attention_section(art, ctx, checkpoint),
                     lambda: Section("experiments", "Seed experiments", experiments.section(art, ctx))):
            t = time.perf_counter()
            sections.append(make())
            log.info("%s", tr("section {id} in {seconds:.1f} s").format(id=sections[-1].id, seconds=time.perf_counter() - t))
    sections.append(deviations_section())
    seconds = time.perf_counter() - t0
    sections.insert(0, summary_section(cfg, outcomes, quick, stages, checkpoint, seconds))
    counts = summarize(outcomes)
    title = tr(TITLE)
    written = [atomic_write_bytes(out / rel, data) for rel, data in art.files.items()]
    written.append(atomic_write_bytes(out / "report.md", render.render_markdown(title, counts.claims_line(), sections)))
    written.append(atomic_write_bytes(out / "report.html", render.render_html(title, counts.claims_line(), counts.ok, sections)))
    return ReportResult(outcomes, out, written, time.perf_counter() - t0)
