"""The report as a list of sections of simple blocks, rendered twice: self-contained HTML and Markdown.

One document model feeds both formats, so they hold the same tables. HTML embeds every figure as a
base64 PNG (readable offline); Markdown links figures/*.png. Files are written atomically.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from transformer_min.core.i18n import language, tr
from transformer_min.core.io import page_marker


@dataclass
class Text:
    """A paragraph. `code` spans are written between backticks."""

    text: str


@dataclass
class Heading:
    """A sub-heading inside a section."""

    text: str
    id: str = ""


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    status_col: int | None = None  # column holding PASS / FAIL (coloured in HTML)
    details: list[list[str]] | None = None  # per row: lines shown folded under `details_col` (HTML only)
    details_col: int = 0
    caption: str = ""


@dataclass
class Figure:
    name: str  # figures/<name>.png
    caption: str
    png: bytes
    data: list[str] = field(default_factory=list)  # data/*.csv files behind the figure


@dataclass
class Preformatted:
    lines: list[str]


@dataclass
class Section:
    id: str
    title: str
    blocks: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1200px; margin: 2em auto;
       padding: 0 1em; color: #1b1b1b; line-height: 1.45; }
h1 { border-bottom: 2px solid #333; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; vertical-align: top; text-align: left; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.PASS { background: #d9f2d9; color: #135e13; font-weight: bold; }
td.FAIL { background: #f8d3d3; color: #8a1111; font-weight: bold; }
td.NOTREP { background: #fbefc8; color: #6b5200; font-weight: bold; }
td.SKIP { background: #eeeeee; color: #555555; font-weight: bold; }
.summary.PASS { color: #135e13; } .summary.FAIL { color: #8a1111; }
code, pre { font-family: Menlo, Consolas, monospace; font-size: 12px; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; }
details pre { margin: .3em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 13px; color: #444; }
nav ol { columns: 2; }
"""


def _inline_html(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _is_number(cell: str) -> bool:
    stripped = cell.replace(",", "").replace("+", "").replace("-", "").replace(".", "").replace("M", "").strip()
    return bool(stripped) and stripped.isdigit()


def _status_class(cell: str) -> str:
    """A status cell in the report's language ('通过') -> its CSS class ('PASS'); Table 3's retrained rows
    have a third status, neither PASS nor FAIL; a check that did not run is SKIP."""
    return {tr("PASS"): "PASS", tr("FAIL"): "FAIL", tr("not reproduced at this scale"): "NOTREP",
            tr("SKIP"): "SKIP"}.get(cell, cell)


def _headers(t: Table) -> list[str]:
    """Column headers in the report's language (a header without a translation stays as written)."""
    return [tr(h) if h else h for h in t.headers]


def _table_html(t: Table) -> str:
    out = ["<table>"]
    if t.caption:
        out.append(f"<caption>{_inline_html(t.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{_inline_html(h)}</th>" for h in _headers(t)) + "</tr></thead><tbody>")
    for i, row in enumerate(t.rows):
        cells = []
        for j, cell in enumerate(row):
            cls = ""
            if t.status_col == j:  # the CSS class stays PASS / FAIL whatever the language of the cell
                cls = f' class="{html.escape(_status_class(cell))}"'
            elif _is_number(cell):
                cls = ' class="num"'
            body = _inline_html(cell)
            if t.details and j == t.details_col and t.details[i]:
                pre = html.escape("\n".join(t.details[i]))
                body = f"<details><summary>{body}</summary><pre>{pre}</pre></details>"
            cells.append(f"<td{cls}>{body}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _block_html(b) -> str:
    if isinstance(b, Text):
        return f"<p>{_inline_html(b.text)}</p>"
    if isinstance(b, Heading):
        anchor = f' id="{html.escape(b.id)}"' if b.id else ""
        return f"<h3{anchor}>{_inline_html(b.text)}</h3>"
    if isinstance(b, Table):
        return _table_html(b)
    if isinstance(b, Preformatted):
        return "<pre>" + html.escape("\n".join(b.lines)) + "</pre>"
    if isinstance(b, Figure):
        data = base64.b64encode(b.png).decode("ascii")
        files = ", ".join(f"<code>data/{html.escape(f)}</code>" for f in b.data)
        return (f'<figure id="fig-{html.escape(b.name)}"><img alt="{html.escape(b.name)}" '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption>{_inline_html(b.caption)}"
                + (" " + tr("Data: {files}.").format(files=files) if files else "") + "</figcaption></figure>")
    raise TypeError(tr("unknown block {name}").format(name=type(b).__name__))


def render_html(title: str, summary: str, passed: bool, sections: list[Section]) -> str:
    status = "PASS" if passed else "FAIL"
    toc = "".join(f'<li><a href="#{s.id}">{html.escape(tr(s.title))}</a></li>' for s in sections)
    body = []
    for s in sections:
        body.append(f'<section id="{s.id}"><h2>{html.escape(tr(s.title))}</h2>')
        body.extend(_block_html(b) for b in s.blocks)
        body.append("</section>")
    lang = "zh-CN" if language() == "zh" else "en"
    return (f"<!DOCTYPE html>\n<html lang=\"{lang}\"><head><meta charset=\"utf-8\">{page_marker('tmin report')}"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
            f"<h1>{html.escape(title)}</h1>\n"
            f"<p class=\"summary {status}\"><strong>{_inline_html(summary)}</strong></p>\n"
            f"<nav><h2>{html.escape(tr('Contents'))}</h2><ol>{toc}</ol></nav>\n" + "\n".join(body)
            + "\n</body></html>\n")


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------

def _md_cell(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def _table_md(t: Table) -> str:
    lines = []
    if t.caption:
        lines.append(f"*{t.caption}*\n")
    lines.append("| " + " | ".join(_md_cell(h) for h in _headers(t)) + " |")
    lines.append("|" + "---|" * len(t.headers))
    for row in t.rows:
        cells = [f"**{c}**" if j == t.status_col else _md_cell(c) for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _block_md(b) -> str:
    if isinstance(b, Text):
        return b.text
    if isinstance(b, Heading):
        return f"### {b.text}"
    if isinstance(b, Table):
        return _table_md(b)
    if isinstance(b, Preformatted):
        return "```\n" + "\n".join(b.lines) + "\n```"
    if isinstance(b, Figure):
        files = ", ".join(f"[`data/{f}`](data/{f})" for f in b.data)
        return (f"![{b.name}](figures/{b.name}.png)\n\n*{b.caption}*"
                + (" " + tr("Data: {files}.").format(files=files) if files else ""))
    raise TypeError(tr("unknown block {name}").format(name=type(b).__name__))


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def render_markdown(title: str, summary: str, sections: list[Section]) -> str:
    out = [f"# {title}", "", f"**{summary}**", "", f"## {tr('Contents')}", ""]
    out += [f"{i}. [{tr(s.title)}](#{_anchor(tr(s.title))})" for i, s in enumerate(sections, start=1)]
    for s in sections:
        out += ["", f"## {tr(s.title)}", ""]
        for b in s.blocks:
            out += [_block_md(b), ""]
    return "\n".join(out).rstrip() + "\n"
