"""report/deviations.py is the one source of truth: docs/deviations.md is generated from it, and
every config switch it names exists with the default it states."""

from __future__ import annotations

from pathlib import Path

from transformer_min.core.config import Config
from transformer_min.report import deviations

REPO = Path(__file__).resolve().parents[2]


def test_docs_deviations_md_is_in_sync():
    on_disk = (REPO / "docs" / "deviations.md").read_text(encoding="utf-8")
    assert on_disk == deviations.markdown_document(), (
        "docs/deviations.md is out of date; regenerate it with "
        "`python -m transformer_min.report.deviations > docs/deviations.md`")


def _render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def test_every_named_switch_exists_with_the_stated_default():
    cfg = Config()
    for d in deviations.DEVIATIONS:
        if d.switch == "-":
            continue
        for key in d.switch.split(", "):
            section, name = key.split(".")
            value = getattr(getattr(cfg, section), name)  # AttributeError = a stale switch name
            if value is not None and ", " not in d.switch:
                assert d.default.startswith(_render(value)) or float(d.default.split()[0]) == value, (
                    f"{d.topic}: default {d.default!r} but Config().{key} = {value!r}")


def test_required_topics_are_listed():
    topics = {d.topic for d in deviations.DEVIATIONS}
    for needed in ("LayerNorm epsilon", "initialisation", "biases in the projections", "attention dropout",
                   "ReLU dropout", "label-smoothing distribution", "fully masked attention rows", "pre-norm",
                   "learned positions", "weight tying off", "learning-rate factor", "gradient clipping"):
        assert needed in topics
    assert {d.kind for d in deviations.DEVIATIONS} == {"gap", "departure"}


def test_markdown_table_escapes_pipes(monkeypatch):
    row = deviations.Deviation("gap", "a | b", "p", "o", "-", "-")
    monkeypatch.setattr(deviations, "DEVIATIONS", [row])
    lines = deviations.markdown_table().splitlines()
    assert lines[2] == "| gap | a \\| b | p | o | - | - |"
