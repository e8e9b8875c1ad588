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

from analysis.rcp_table import write_atomic


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


@dataclass(frozen=True)
class Shown:
    """A cell shown as `text` while the table still carries its exact `value` (HTML's
    data-value), e.g. a statistic that is not meaningful."""

    value: Any
    text: str


def _fmt(value: Any) -> str:
    if isinstance(value, Shown):
        return value.text
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
div.table { overflow-x: auto; } table { border-collapse: collapse; font-size: 0.85rem; } th, td { padding: 3px 8px; border: 1px solid #ddd; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } th { background: #f4f4f4; }
img { max-width: 100%; } pre { background: #f7f7f7; padding: 0.8rem; font-size: 0.8rem; overflow-x: auto; }
figcaption { font-size: 0.8rem; color: #555; }
"""


def _table_html(section: Section) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in section.columns)
    body = []
    for row in section.rows:
        cells = []
        for c in section.columns:
            shown = row.get(c)
            value = shown.value if isinstance(shown, Shown) else shown
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            attrs = f' class="num" data-value="{value!r}"' if numeric else ""
            cells.append(f"<td{attrs}>{html.escape(_fmt(shown))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table"><table id="table-{section.key}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def render_html(title: str, sections: list[Section]) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        parts.append(f'<section id="{s.key}"><h2>{html.escape(s.title)}</h2>')
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
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(title: str, sections: list[Section], folder: Path) -> str:
    """Markdown text; figures are written as PNG files into `folder`."""
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.text:
            lines += [s.text, ""]
        if s.preformatted:
            lines += ["```", s.preformatted.rstrip(), "```", ""]
        if s.columns:
            lines.append("| " + " | ".join(s.columns) + " |")
            lines.append("|" + "---|" * len(s.columns))
            for row in s.rows:
                lines.append("| " + " | ".join(_fmt(row.get(c)) for c in s.columns) + " |")
            lines.append("")
        if s.figure:
            name = f"{s.key}.png"
            (folder / name).write_bytes(s.figure)
            lines += [f"![{s.title}]({name})", ""]
    return "\n".join(lines)


def write_report(path: Path, title: str, sections: list[Section], fmt: str) -> Path:
    if fmt == "html":
        write_atomic(path, render_html(title, sections))
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_markdown(title, sections, path.parent))
    return path
