"""The reporting kit: self-contained HTML pages, tables and embedded figures for every stage's report.

One stylesheet, one way to render a table (values formatted, escaped), one way to embed a matplotlib
figure (PNG, base64, closed after use) and one page frame, so the curation report, the training
report and the reports still to come look and read alike and open offline; and one way to show such a
page inside a front end's markdown (:func:`in_markdown`).
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}.ok{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}
.flag{background:#fff3cd}figure{margin:1em 0}figcaption{font-size:.9em;color:#555}
img{max-width:100%}code{background:#f6f8fa;padding:0 .2em}td.num{text-align:right}
"""


def percent_by_family(accuracy: Mapping[str, float]) -> str:
    """``code 0%, math 67%``: per-family accuracies as the CLI, the artifacts and the reports show them."""
    return ", ".join(f"{f} {a:.0%}" for f, a in accuracy.items())


def escape(value: Any) -> str:
    return html.escape(str(value))


def png(fig: Any, dpi: int = 90) -> str:
    """A matplotlib figure as base64 PNG (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    try:
        import matplotlib.pyplot as plt

        plt.close(fig)
    except (ImportError, TypeError, ValueError):
        pass  # a Figure not managed by pyplot needs no closing
    return base64.b64encode(buf.getvalue()).decode()


def png_bytes(data: bytes) -> str:
    """A PNG file's bytes as base64 (for images stored in an artifact)."""
    return base64.b64encode(data).decode()


def figure(png_b64: str | None, caption: str, anchor: str = "") -> str:
    """An embedded figure with its caption (a 'no data' line when there is no image)."""
    ident = f' id="{escape(anchor)}"' if anchor else ""
    if png_b64 is None:
        return f"<p{ident}><em>{escape(caption)}: no data.</em></p>"
    return (
        f'<figure{ident}><img alt="{escape(caption)}" src="data:image/png;base64,{png_b64}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: Callable[[Any], str] = str,
    row_class: Sequence[str] | None = None,
) -> str:
    """An HTML table; every cell goes through ``fmt`` then is escaped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{escape(fmt(v))}</td>" for v in row) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def facts(pairs: Sequence[tuple[Any, Any]]) -> str:
    """A two-column table of labelled facts."""
    return (
        "<table>"
        + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in pairs)
        + "</table>"
    )


def page(title: str, body: Sequence[str]) -> str:
    """A whole HTML document: the title, the kit's stylesheet, the body parts in order."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>{''.join(body)}</body></html>\n"
    )


_DROPPED = re.compile(r"<(script|style|head|title)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_MARKED = re.compile(r"<span class=\"(?:ok|fail)\">(.*?)</span>", re.S)
_RELATIVE = re.compile(r"""\b(href|src)=(["'])(?![a-z][a-z0-9+.-]*:|#|/)([^"']+)\2""", re.I)
_TAGS = re.compile(r"<[^>]+>")
_BLOCK = re.compile(
    r"<h(?P<level>[1-6])\b[^>]*>(?P<title>.*?)</h(?P=level)\s*>|<table\b[^>]*>(?P<table>.*?)</table\s*>",
    re.S | re.I,
)
_LINK = re.compile(r"""<a\b[^>]*\bhref=["']([^"']*)["'][^>]*>(.*?)</a\s*>""", re.S | re.I)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr\s*>", re.S | re.I)
_CELL = re.compile(r"<t([hd])\b[^>]*>(.*?)</t\1\s*>", re.S | re.I)


def _cell(cell_html: str) -> str:
    """A table cell's text for a markdown table: one line, markdown's characters escaped, bold and
    links kept as markdown."""
    urls: list[str] = []

    def link(m: re.Match[str]) -> str:
        urls.append(m.group(1).replace(")", "%29"))
        return f"\x01{m.group(2)}\x02"

    marked = _LINK.sub(link, re.sub(r"</?strong>", "\x00", cell_html))
    text = " ".join(html.unescape(_TAGS.sub("", marked)).split())
    text = re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text).replace("\x00", "**").replace("\x01", "[")
    for url in urls:
        text = text.replace("\x02", f"]({url})", 1)
    return text or " "


MARKDOWN_TABLE_CHARS = 90
"""The most characters a markdown table may need side by side (its columns' longest unbreakable
words plus their padding) before it is split: the Prefect UI's artifact column holds about 90
characters at a 1400-pixel window and clips, without a scroll bar, whatever does not fit."""

_SHOWN = re.compile(r"\[(.*?)\]\([^)]*\)|\\(.)|\*\*")


def _min_chars(cell: str) -> int:
    """The width a rendered markdown cell cannot shrink below: its longest word, plus the padding."""
    shown = _SHOWN.sub(lambda m: m.group(1) or m.group(2) or "", cell)
    return max((len(word) for word in shown.split()), default=0) + 3


def _column_groups(rows: list[list[str]], width: int, budget: int) -> list[list[int]]:
    """Columns 1.. in consecutive groups that fit ``budget`` beside column 0 (each group's table
    repeats column 0, the rows' labels); one group when the whole table fits."""
    need = [max(_min_chars(r[c]) for r in rows) for c in range(width)]
    groups: list[list[int]] = [[]]
    used = need[0]
    for c in range(1, width):
        if groups[-1] and used + need[c] > budget:
            groups.append([])
            used = need[0]
        groups[-1].append(c)
        used += need[c]
    return groups


def _markdown_table(table_html: str, budget: int = MARKDOWN_TABLE_CHARS) -> str:
    """A table of this kit (a header row, then rows) as markdown, which the UI styles; a table too
    wide for the UI's column (``budget`` characters) is split into tables of consecutive columns,
    each led by the first column, so nothing is clipped."""
    rows = [[_cell(c[1]) for c in _CELL.findall(r)] for r in _ROW.findall(table_html)]
    rows = [r for r in rows if r]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [" "] * (width - len(r)) for r in rows]
    groups = _column_groups(rows, width, budget) if width > 2 else [list(range(1, width))]
    tables = []
    for group in groups:
        lines = ["| " + " | ".join(r[c] for c in [0, *group]) + " |" for r in rows]
        tables.append("\n".join([lines[0], "|" + "---|" * (len(group) + 1), *lines[1:]]))
    return "\n\n".join(tables)


def in_markdown(page_html: str, resolve: Callable[[str], str]) -> str:
    """A page of this kit as markdown for a renderer that takes sanitized HTML inside markdown (the
    Prefect UI's): its body only (no stylesheet, head or scripts), headings and tables as markdown
    (the renderer styles those, not bare ``<h2>`` and ``<table>``), PASSED/FAILED marks in bold,
    links and images relative to the page made absolute by ``resolve`` (a relative path → a URL a
    browser opens), and each stretch of HTML one block (a blank line would end it mid-figure)."""
    body = re.search(r"<body\b[^>]*>(.*)</body\s*>", page_html, re.S | re.I)
    text = _DROPPED.sub("", body.group(1) if body else page_html)
    text = _MARKED.sub(r"<strong>\1</strong>", text)
    text = _RELATIVE.sub(lambda m: f"{m.group(1)}={m.group(2)}{resolve(m.group(3))}{m.group(2)}", text)
    blocks: list[str] = []
    last = 0
    for m in _BLOCK.finditer(text):
        blocks.append("\n".join(line for line in text[last : m.start()].splitlines() if line.strip()))
        if m.group("level"):
            title = " ".join(html.unescape(_TAGS.sub("", m.group("title"))).split())
            blocks.append("#" * int(m.group("level")) + " " + title)
        else:
            blocks.append(_markdown_table(m.group("table")))
        last = m.end()
    blocks.append("\n".join(line for line in text[last:].splitlines() if line.strip()))
    return "\n\n".join(b.strip() for b in blocks if b.strip()) + "\n"
