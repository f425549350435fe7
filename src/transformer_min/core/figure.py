"""Matplotlib through its object API: each figure is a `matplotlib.figure.Figure` on its own Agg canvas.

No pyplot and no `matplotlib.use(...)`: pyplot keeps a global list of open figures and `use` switches the
backend for the whole process (a caller's interactive backend included). A figure made here is freed when
its last reference goes; files are written atomically (`core.io.atomic_write`).

Text drawn into a figure (titles, axis labels, legends) goes through `ftr`: in Chinese (`--lang zh`) only when
matplotlib has a font with the CJK glyphs (`cjk_font`, checked glyph by glyph, not by name); without one the
figure is drawn in English, never as boxes (tofu), and its caption, which the report prints as text, stays Chinese.
"""

from __future__ import annotations

import io
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from transformer_min.core.i18n import language, tr
from transformer_min.core.io import atomic_write

# Characters of our figures' Chinese that a font must draw to count as a CJK font.
CJK_SAMPLE = "中文图表的标题坐标轴图例学习率损失位置维度注意力头层"
# Names that usually hold CJK glyphs: checked first (a name is a hint; the glyphs decide).
CJK_HINT = re.compile(r"CJK|Han |Hei|Song|Ming|Kai|YaHei|PingFang|Hiragino|WenQuanYi|Fallback|Gothic|Mincho|"
                      r"Unifont| SC\b| TC\b| JP\b| KR\b", re.I)


def has_glyphs(path: str, text: str = CJK_SAMPLE) -> bool:
    """Whether the font file at `path` has its own glyph for every character of `text`: each maps to a glyph, and
    different characters to different glyphs (a last-resort font such as matplotlib's LastResortHE maps every
    character of a block to one box). False when the file cannot be read."""
    from matplotlib.ft2font import FT2Font

    try:
        font = FT2Font(path)
        glyphs = {ch: font.get_char_index(ord(ch)) for ch in text}
    except (OSError, RuntimeError, ValueError):
        return False
    return all(glyphs.values()) and len(set(glyphs.values())) == len(glyphs)


@lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The family name of a font matplotlib can use that draws Chinese, or None: hinted names first, then the
    rest, each checked for the glyphs of CJK_SAMPLE."""
    from matplotlib import font_manager

    entries = sorted(font_manager.fontManager.ttflist, key=lambda e: not CJK_HINT.search(e.name))
    seen: set[str] = set()
    for entry in entries:
        if entry.fname not in seen:
            seen.add(entry.fname)
            if has_glyphs(entry.fname):
                quiet_weight_notes(entry.name)
                return entry.name
    return None


def quiet_weight_notes(font: str) -> None:
    """Drop matplotlib's "Failed to find font weight normal for <font>" about the CJK font we chose: a CJK family
    often ships one weight (WenQuanYi Zen Hei: Medium), which draws the fallback glyphs as well."""
    import logging

    logging.getLogger("matplotlib.font_manager").addFilter(
        lambda record: not (record.getMessage().startswith("findfont: Failed to find font weight")
                            and f" for {font}," in record.getMessage()))


def figure_language() -> str:
    """The language figures are drawn in: 'zh' when messages are Chinese and `cjk_font()` found one, else 'en'."""
    return "zh" if language() == "zh" and cjk_font() is not None else "en"


def ftr(message: str) -> str:
    """Text drawn into a figure: `tr(message)` when figures are drawn in Chinese, else the English `message`."""
    return tr(message) if figure_language() == "zh" else message


def figure_fonts() -> dict:
    """What `tmin doctor` reports: the CJK font found (or None) and what --lang zh does with figures."""
    font = cjk_font()
    return {"cjk_font": font, "zh_figures": "chinese" if font else "english_with_chinese_captions"}


def figure_fonts_line(info: dict) -> str:
    """`figure_fonts()` as one line of `tmin doctor`, in the current language."""
    if info["cjk_font"]:
        return tr("--lang zh draws figure text in Chinese with the font {font!r}").format(font=info["cjk_font"])
    return tr("no CJK font for matplotlib: under --lang zh figure text stays English (no boxes) and captions are "
              "Chinese; fix: install one (e.g. apt-get install fonts-noto-cjk), then rm -rf ~/.cache/matplotlib")


def use_cjk_font(fig: Figure) -> None:
    """When figures are drawn in Chinese: every text of `fig` falls back to the CJK font for the glyphs its own
    font lacks (its own font still draws the Latin letters, digits and the minus sign)."""
    from matplotlib.text import Text

    if figure_language() != "zh":
        return
    font = cjk_font()
    for text in fig.findobj(Text):
        families = list(text.get_fontfamily())
        if font not in families:
            text.set_fontfamily([*families, font])


class TminFigure(Figure):
    """A Figure that sets its texts' fonts (`use_cjk_font`) before anything measures or draws them: a layout
    (tight_layout, bbox_inches="tight") measures the text in the font it is drawn in, and no glyph is missing."""

    def draw(self, renderer):
        use_cjk_font(self)
        super().draw(renderer)

    def tight_layout(self, *args: Any, **kwargs: Any) -> None:
        use_cjk_font(self)
        super().tight_layout(*args, **kwargs)


def new_figure(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, **subplots: Any) -> tuple[Figure, Any]:
    """A figure of `figsize` inches with an Agg canvas and its axes (`Figure.subplots(nrows, ncols, **subplots)`:
    one Axes for 1 x 1, else an array)."""
    fig = TminFigure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **subplots)


def png_bytes(fig: Figure, dpi: int, **savefig: Any) -> bytes:
    """The figure as PNG bytes (for a writer that collects files, or an HTML page that embeds them)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, **savefig)
    return buf.getvalue()


PNG_SOFTWARE = "tmin"  # the PNG's Software text chunk: how an earlier figure of ours is recognised
PNG_MARKER = f"Software\x00{PNG_SOFTWARE}"


def save_png(fig: Figure, path: str | Path, dpi: int, caption: str | None = None, **savefig: Any) -> Path:
    """Write the figure to `path` as PNG, atomically (a reader never sees half a file), marked as ours; `caption`
    goes into its Description (in the current language even when the figure is drawn in English)."""
    savefig.setdefault("metadata", {"Software": PNG_SOFTWARE, **({"Description": caption} if caption else {})})
    return atomic_write(Path(path), lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, **savefig))
