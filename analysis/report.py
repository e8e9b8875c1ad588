"""A campaign report: one self-contained HTML file (figures embedded as data URIs, no
network needed) or markdown with PNG files beside it. Every section is a title, an
optional table and an optional figure; numbers are shown rounded and carried exactly
in each cell's `data-value`, so a reader (or a test) can check them against the CSV."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rcpforge.analysis.display import Shown, cell_text, header, markdown_header
from rcpforge.analysis.rcp_table import write_atomic


@dataclass
class Section:
    key: str
    title: str
    text: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    figure: bytes | None = None
    figure_caption: str = ""
    preformatted: str = ""
    collapsed: bool = False  # HTML: folded under its title (a long dump a reader opens on demand)
    level: int = 2  # the heading's level: 3 for a section under a heading of its own (one model's)


# Tables wrap rather than scroll: a table takes the page's width; text cells wrap (where
# they must, inside a word: a grid variant's name has no space), and a long one (a note)
# keeps a readable width. Headers break at spaces and numbers not at all while the page
# is wide enough for the widest table (the RCP table's 14 columns need about 1050 px); on
# a narrower page and on paper they may break anywhere, so no column hides behind a
# scroll bar or is cut off.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; padding: 0 1rem; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.8rem; width: 100%; }
th, td { padding: 3px 5px; border: 1px solid #ddd; vertical-align: top; overflow-wrap: break-word; }
td { overflow-wrap: anywhere; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th { background: #f4f4f4; font-weight: 600; } td.long { min-width: 12em; width: 30%; }
@media (max-width: 1150px), print {
  table { font-size: 0.72rem; } th, td { overflow-wrap: anywhere; } td.long { min-width: 6em; width: 25%; }
}
img { max-width: 100%; } pre { background: #f7f7f7; padding: 0.8rem; font-size: 0.8rem; white-space: pre-wrap; }
figcaption { font-size: 0.8rem; color: #555; } summary { cursor: pointer; } summary > h2 { display: inline-block; }
@media print { body { margin: 0; padding: 0; max-width: none; } }
"""


def _table_html(section: Section) -> str:
    # data-key: the column's name in the data (CSV, JSON), for a reader or test that
    # matches columns; the text is the header a person reads.
    head = "".join(f'<th data-key="{html.escape(c)}">{html.escape(header(c))}</th>' for c in section.columns)
    body = []
    for row in section.rows:
        cells = []
        for c in section.columns:
            shown = row.get(c)
            value = shown.value if isinstance(shown, Shown) else shown
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            text = cell_text(c, shown)
            attrs = f' class="num" data-value="{value!r}"' if numeric else ' class="long"' if len(text) > 40 else ""
            cells.append(f"<td{attrs}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table id="table-{section.key}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def render_html(title: str, sections: list[Section]) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        heading = f"<h{s.level}>{html.escape(s.title)}</h{s.level}>"
        parts.append(f'<section id="{s.key}">' + (f"<details><summary>{heading}</summary>" if s.collapsed else heading))
        if s.text:
            parts.append(f"<p>{html.escape(s.text)}</p>")
        if s.preformatted:
            parts.append(f"<pre>{html.escape(s.preformatted)}</pre>")
        if s.columns:
            parts.append(_table_html(s))
        if s.figure:
            data = base64.b64encode(s.figure).decode()
            parts.append(f'<figure><img id="fig-{s.key}" alt="{html.escape(s.title)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{html.escape(s.figure_caption)}'
                         "</figcaption></figure>")
        parts.append("</details></section>" if s.collapsed else "</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(title: str, sections: list[Section], folder: Path, prefix: str = "report") -> str:
    """Markdown text; figures are written as PNG files into `folder`, named
    `<prefix>-<section>.png` so that reports written into one folder keep their own."""
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"{'#' * s.level} {s.title}", ""]
        if s.text:
            lines += [s.text, ""]
        if s.preformatted:
            lines += ["```", s.preformatted.rstrip(), "```", ""]
        if s.columns:
            lines += markdown_header(s.columns)
            for row in s.rows:
                lines.append("| " + " | ".join(cell_text(c, row.get(c)) for c in s.columns) + " |")
            lines.append("")
        if s.figure:
            name = f"{prefix}-{s.key}.png"
            (folder / name).write_bytes(s.figure)
            lines += [f"![{s.title}]({quote(name)})", ""]
    return "\n".join(lines)


def write_report(path: Path, title: str, sections: list[Section], fmt: str) -> Path:
    if fmt == "html":
        write_atomic(path, render_html(title, sections))
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_markdown(title, sections, path.parent, path.stem))
    return path
