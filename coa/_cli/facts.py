"""The terminal's view of a step: what its stage presents (:func:`coa.plan.stages.facts`), as text.

Every stage command prints its artifact's URI on a line of its own (``model: URI``, what scripts
read), then this: the same facts the Prefect layer publishes as artifacts, rendered once here, so the
CLI and the Prefect UI show one thing. Tables become aligned columns (the first ``max_rows`` rows),
markdown is printed as written (an image embedded as a data URI is named, not dumped), a link is its
description and URL, a page (a committed HTML report) its description and where it lies; the
warnings go to stderr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import typer

from coa import io
from coa._cli.common import err
from coa.facts import Facts, Link, Markdown, Page, Table

MAX_ROWS = 20
"""Rows of a table the terminal shows (the rest is counted; ``coa show`` opens the artifact)."""

_DATA_IMAGE = re.compile(r"!\[([^\]]*)\]\(data:[^)]*\)")


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def table_text(rows: Sequence[Mapping[str, Any]], max_rows: int = MAX_ROWS) -> str:
    """``rows`` as aligned columns under a header (every key any row has, in first-seen order)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for row in rows for k in row))
    shown = [[_cell(row.get(c)) for c in columns] for row in rows[:max_rows]]
    widths = [max(len(c), *(len(r[i]) for r in shown)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in shown]
    if len(rows) > max_rows:
        lines.append(f"... {len(rows) - max_rows} more row(s)")
    return "\n".join(lines)


def _without_data_images(text: str, what: str) -> str:
    """``text`` with each image embedded as a data URI named instead (a terminal cannot show it)."""

    def named(match: re.Match[str]) -> str:
        return f"[image: {match.group(1) or what}]"

    return _DATA_IMAGE.sub(named, text).strip()


def facts_text(facts: Facts, max_rows: int = MAX_ROWS) -> str:
    """The facts (not the warnings) as the terminal shows them, in order, a blank line between."""
    parts: list[str] = []
    for fact in facts.items:
        if isinstance(fact, Table):
            title = f"{fact.description}\n" if fact.description else ""
            parts.append(title + table_text(fact.rows, max_rows))
        elif isinstance(fact, Markdown):
            parts.append(_without_data_images(fact.text, fact.what))
        elif isinstance(fact, Link):
            parts.append(f"{fact.description or fact.what}: {fact.url}")
        elif isinstance(fact, Page):  # a committed HTML report: where it lies (the UI shows it in place)
            parts.append(f"{fact.description or fact.what}: {io.join(fact.uri, fact.relpath)}")
    return "\n\n".join(p for p in parts if p)


def show_facts(facts: Facts, max_rows: int = MAX_ROWS) -> None:
    """Print ``facts`` on stdout and their warnings on stderr."""
    text = facts_text(facts, max_rows)
    if text:
        typer.echo(text)
    for warning in facts.warnings:
        err.print(f"[bold red]warning:[/] {warning}", highlight=False, soft_wrap=True)


def show_step(step: Any, result: Any) -> None:
    """What ``step``'s stage presents of ``result`` (:func:`coa.plan.stages.facts`), printed."""
    from coa.plan.stages import facts

    show_facts(facts(step.stage, result))
