"""Figures under --lang zh (issue 38): titles, axis labels and legends in Chinese when matplotlib has a font that
draws Chinese, else in English (never boxes) with the captions still Chinese; which of the two happens is said by
`tmin doctor`. The font lookup is checked glyph by glyph against fontconfig, and both branches are drawn with the
lookup patched."""

from __future__ import annotations

import ast
import re
import shutil
import string
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from tests.cli.english_prose import english_run
from transformer_min.core import figure
from transformer_min.core.i18n import parse_po, po_text, set_language

SRC = Path(figure.__file__).resolve().parents[1]
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def ftr_literals() -> set[str]:
    """Every ftr("...") literal in the package source (read with ast)."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ftr"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                found.add(node.args[0].value)
    return found


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_figure_text_is_translated_with_the_same_fields():
    from transformer_min.report import figures, table1

    catalog = parse_po(po_text("zh"))
    used = ftr_literals() | set(figures.KIND_TITLES.values()) | set(table1.PATH_LABELS.values())
    used.add("cross-attention (last layer, mean of heads)")  # tmin translate --attention's title
    assert len(used) > 30
    assert sorted(m for m in used if not catalog.get(m)) == []
    assert all(fields(catalog[m]) == fields(m) and CJK.search(catalog[m]) for m in used)


# ------------------------------------------------------------------------------------ the font lookup itself
def mpl_font(name: str) -> str:
    from matplotlib import font_manager

    return next(e.fname for e in font_manager.fontManager.ttflist if Path(e.fname).name == name)


def test_a_last_resort_font_or_a_latin_font_does_not_count_as_chinese():
    """matplotlib ships LastResortHE, which has an entry for every character (one box per block): not a CJK font."""
    assert not figure.has_glyphs(mpl_font("LastResortHE-Regular.ttf"))
    assert not figure.has_glyphs(mpl_font("DejaVuSans.ttf"))
    assert figure.has_glyphs(mpl_font("DejaVuSans.ttf"), "abc")
    assert not figure.has_glyphs("/nonexistent/font.ttf")


def fontconfig_chinese_fonts() -> list[str]:
    if shutil.which("fc-list") is None:
        pytest.skip("fontconfig's fc-list is not installed")
    out = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[0].strip() for line in out.splitlines() if line.strip()]


def test_the_lookup_agrees_with_fontconfig():
    """fontconfig's language coverage is the independent reference: its Chinese fonts have the glyphs, and with
    none of them installed matplotlib has no CJK font either (its bundled fonts have none)."""
    chinese = fontconfig_chinese_fonts()
    assert all(figure.has_glyphs(path) for path in chinese[:5])
    if not chinese:
        assert figure.cjk_font() is None
        assert figure.figure_fonts() == {"cjk_font": None, "zh_figures": "english_with_chinese_captions"}


# ------------------------------------------------------------------------------------ both branches, drawn
class Recording:
    """Collects each report figure (the matplotlib Figure) with its caption."""

    def __init__(self):
        from transformer_min.report.figures import Artifacts

        self.art = Artifacts()
        self.drawn: list[tuple[object, str]] = []
        keep = self.art.figure

        def figure_(name, fig, caption, data):
            self.drawn.append((fig, caption))
            return keep(name, fig, caption, data)

        self.art.figure = figure_


def draw_everything(tmp_path, monkeypatch) -> list[tuple[object, str]]:
    """The report's figures (figures.py), the heads bar chart, a translation's heatmap and metrics.png:
    (figure, caption) each."""
    from transformer_min.report import experiments, figures
    from transformer_min.training import metrics
    from transformer_min.viz import heatmap

    rec = Recording()
    figures.positional(rec.art, positions=20, d_model=128)
    figures.schedule(rec.art, every=500, last=5000)
    figures.softmax_scaling(rec.art, rows=50, max_log2=3)
    figures.causal_mask(rec.art, size=4)
    figures.label_smoothing(rec.art)
    drawn = list(rec.drawn)
    drawn.append((experiments.plt_bar([1.0], [0.5, 0.7], 1.8, 2)[0], ""))
    saved = []
    original = figure.save_png
    monkeypatch.setattr(figure, "save_png", lambda fig, path, dpi, caption=None, **kw: (
        saved.append((fig, caption or "")) or original(fig, path, dpi, caption=caption, **kw)))
    heatmap.attention_heatmap(torch.eye(2), ["a", "b"], ["x", "y"], tmp_path / "h.png",
                              title="cross-attention (last layer, mean of heads)")
    history = [{"step": s, "loss": 5.0 / s, "lr": 1e-3 * s} for s in range(1, 20)]
    metrics.plot_metrics(history, tmp_path / "metrics.png", "run")
    monkeypatch.setattr(figure, "save_png", original)
    return drawn + saved


def labels_of(fig) -> list[str]:
    """Titles, axis labels and legend entries of a figure."""
    out = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) else []
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return [t for t in out if t]


def test_without_a_cjk_font_figures_stay_english_and_captions_chinese(monkeypatch, tmp_path):
    """No CJK font: no Chinese character is drawn (so no box), and no glyph is missing while drawing; the captions
    the report prints as text and metrics.png's Description are Chinese."""
    from PIL import Image

    monkeypatch.setattr(figure, "cjk_font", lambda: None)
    set_language("zh")
    assert figure.figure_language() == "en" and figure.ftr("step") == "step"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" for a box
        drawn = draw_everything(tmp_path, monkeypatch)
        for fig, _ in drawn:
            figure.png_bytes(fig, dpi=40)
    for fig, caption in drawn:
        texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
        assert not [t for t in texts if CJK.search(t)]
        assert labels_of(fig)
    assert all(CJK.search(caption) for _, caption in drawn if caption)
    assert "step" in labels_of(drawn[-1][0]) and "source tokens" in labels_of(drawn[-2][0])
    assert CJK.search(Image.open(tmp_path / "metrics.png").text["Description"])


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # the patched font is not installed
def test_with_a_cjk_font_titles_labels_and_legends_are_chinese(monkeypatch, tmp_path):
    """A CJK font (the lookup patched to name one): every figure's labels hold Chinese, and every text falls back
    to that font for the glyphs its own lacks."""
    monkeypatch.setattr(figure, "cjk_font", lambda: "Test CJK Sans")
    monkeypatch.setattr(figure, "use_cjk_font", lambda fig: None)  # the fake font is not drawn: checked below
    set_language("zh")
    assert figure.figure_language() == "zh" and figure.ftr("step") == "步数"
    for fig, _ in draw_everything(tmp_path, monkeypatch):
        labels = labels_of(fig)
        assert [t for t in labels if CJK.search(t)], labels
    monkeypatch.undo()
    monkeypatch.setattr(figure, "cjk_font", lambda: "Test CJK Sans")
    set_language("zh")
    fig, ax = figure.new_figure((2, 2))
    ax.set_xlabel(figure.ftr("step"))
    figure.use_cjk_font(fig)
    assert ax.xaxis.label.get_fontfamily()[-1] == "Test CJK Sans"
    set_language("en")
    assert figure.figure_language() == "en" and figure.ftr("step") == "step"


def test_a_real_cjk_font_draws_chinese_without_a_missing_glyph(tmp_path, monkeypatch):
    """Where a CJK font is installed: the Chinese figures draw every glyph (no box)."""
    if figure.cjk_font() is None:
        pytest.skip("no CJK font here (the English branch is tested above)")
    set_language("zh")
    drawn = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for fig, _ in draw_everything(tmp_path, monkeypatch):
            assert figure.png_bytes(fig, dpi=40)[:4] == b"\x89PNG"
            drawn += 1
    assert drawn > 0
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert missing == [], missing[:3]  # a glyph missing from every font is drawn as a box


@pytest.mark.usefixtures("restore_logging", "clean_tmin_env")
def test_doctor_says_which_one_happens(monkeypatch, tmp_path, capsys):
    from transformer_min.cli.main import main

    monkeypatch.chdir(tmp_path)
    for font, english, chinese in ((None, "no CJK font", "没有可用的中日韩字体"),
                                   ("WenQuanYi Zen Hei", "with the font 'WenQuanYi Zen Hei'", "字体为 'WenQuanYi Zen Hei'")):
        monkeypatch.setattr(figure, "cjk_font", lambda font=font: font)
        info = figure.figure_fonts()
        assert info["zh_figures"] == ("chinese" if font else "english_with_chinese_captions")
        set_language("en")
        assert english in figure.figure_fonts_line(info)
        set_language("zh")
        line = figure.figure_fonts_line(info)
        assert chinese in line and "boxes" not in line and english_run(line) is None, line
        assert main(["doctor", "--probe-seconds", "0", "--lang", "zh"]) == 0
        shown = [s for s in capsys.readouterr().out.splitlines() if s.startswith("图表")]
        assert len(shown) == 1 and shown[0].endswith(line)
