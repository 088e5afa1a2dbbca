"""The viewer's page: one self-contained HTML file (inline CSS and script, no network) that lists a
:class:`~coa.view.episodes.View`'s episodes, filters and searches them, and shows each one's steps.

The episodes are embedded once as JSON (``<script type="application/json">``, ``</`` escaped) and
the script shows them a page of :data:`PAGE_SIZE` at a time, so a page of tens of thousands of
episodes opens as fast as the browser parses the JSON. The filters live in the address's fragment
(``#family=math&verdict=fail&q=paris&page=2``): a filtered view is a link, and the page opens on it
(the steps' Prefect artifacts link views such as ``#verdict=fail`` and
``#kind=quarantined&reason=exact_duplicate``: :mod:`coa.view.links`). ``reason`` matches one part of
an episode's reason (its parts split at ``:``, ``;`` and ``,``: a quarantine's ``stage: reason:
detail``), not any text in it.
Text is always set as text, never as markup: a tool's output cannot inject anything into the page.
"""

from __future__ import annotations

import json
from pathlib import Path

from coa.pages import escape
from coa.view.episodes import View

PAGE_SIZE = 25
"""Episodes shown at once; the pager moves through the rest."""
COLLAPSE_CHARS = 600
"""A tool call or an observation longer than this is collapsed (one click opens it)."""


_HERE = Path(__file__).parent
CSS = (_HERE / "viewer.css").read_text(encoding="utf-8")
"""The page's stylesheet (``viewer.css`` beside this module, shipped as package data)."""
SCRIPT = (_HERE / "viewer.js").read_text(encoding="utf-8")
"""The page's script (``viewer.js``): reads the embedded JSON, filters, searches, pages, renders."""


def _select(key: str, label: str) -> str:
    return f'<label>{label} <select id="f-{key}"><option value="">all</option></select></label>'


def render(view: View, page_size: int = PAGE_SIZE) -> str:
    """The whole page for ``view``, ``page_size`` episodes at a time."""
    data = {
        "episodes": [e.to_json() for e in view.episodes],
        "teacher": [e.to_json() for e in view.teacher],
        "page_size": page_size,
        "collapse": COLLAPSE_CHARS,
    }
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    sampled = ""
    if view.sampled_from is not None:
        sampled = (
            f'<div id="sampled">This artifact holds {view.sampled_from:,} episodes; this page shows '
            f"{len(view.episodes):,} of them, evenly spaced over its rows (a deterministic sample: "
            "the same artifact gives the same page). Give <code>coa view --cap N</code> for more.</div>"
        )
    teacher = ""
    if view.teacher_uri:
        teacher = (
            f"<div class='meta'>beside the teacher: {escape(view.teacher_uri)} "
            f"({len(view.teacher):,} of its {view.teacher_total:,} episodes, those on the tasks shown)</div>"
        )
    legend = "".join(
        f'<span class="step r-{r}">{r.replace("_", " ")}</span>'
        for r in ("think", "plan", "tool_call", "observation", "reflection", "verification", "answer")
    )
    filters = (
        _select("kind", "kind") + _select("family", "family") + _select("verdict", "verdict")
        + _select("status", "status")
        + '<label>reason <input type="search" id="f-reason" placeholder="e.g. exact_duplicate"></label>'
        + '<label>reward <input type="number" step="any" id="f-rmin" placeholder="min">'
        '<input type="number" step="any" id="f-rmax" placeholder="max"></label>'
        '<label>tokens <input type="number" id="f-lmin" placeholder="min">'
        '<input type="number" id="f-lmax" placeholder="max"></label>'
        '<label>search <input type="search" id="f-q" placeholder="text in the task or any step"></label>'
        '<span class="pager"><button id="prev">◀</button><span id="pageno"></span>'
        '<button id="next">▶</button></span>'
    )  # fmt: skip
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>episodes: {escape(view.uri)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>Episodes of {escape(view.uri)}</h1>"
        f"<div class='meta'>{escape('; '.join(view.kinds))}</div>{teacher}{sampled}"
        f"<div class='meta'><span id='count'></span> of {len(view.episodes):,} episodes match "
        f"<span class='legend'>{legend}</span></div>"
        f"<div class='filters'>{filters}</div></header>"
        "<main><pre id='errors'></pre><div id='episodes'></div></main>"
        f'<script type="application/json" id="coa-data">{payload}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def write(view: View, out: str | Path, page_size: int = PAGE_SIZE) -> Path:
    """Write the page of ``view`` to ``out`` (whole or not at all: a temporary file, then a rename)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(view, page_size), encoding="utf-8")
    tmp.replace(path)
    return path
