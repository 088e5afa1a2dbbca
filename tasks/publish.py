"""Prefect artifacts of a step: what its stage presents (:data:`coa.plan.stages.PRESENTERS`), one
artifact per fact, small, keyed per step, described. One publisher for every stage: it knows none.

Keys are unique per flow, profile and step (``pipeline-demo-collect-summary`` and
``pipeline-demo-collect-heldout-summary`` are two artifacts; ``nightly-demo-…`` keeps its own);
tables rather than code blocks (the UI clips wide code); links point at the committed artifact
(its store URI), never at a temporary folder.

A :class:`~coa.facts.Page` (an HTML report committed with its artifact: curation's data-quality report,
an evaluation's, the training report) becomes a markdown artifact that shows the page itself in the
UI, figures included (the UI renders sanitized HTML and ``data:`` images inside markdown), headed by
a link a browser can open: a presigned URL on S3 (valid :data:`coa.io.LINK_EXPIRES_S`), the
``file://`` path for a local store, which a browser opens only on the machine that holds the store
(typed in: browsers do not follow ``file://`` links from a web page).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import PurePath

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from coa import io, pages
from coa.errors import describe
from coa.facts import Fact, Markdown, Page, Table
from coa.plan.stages import facts
from coa.registry.history import NightRow
from coa.registry.history import plot as history_plot
from coa.steps import Step, StepResult

MAX_PAGE_CHARS = 2_000_000
"""A page larger than this is linked, not shown: the UI loads an artifact whole."""


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits, single dashes) made of ``parts``
    (e.g. the scope ``nightly-demo``, the step ``evaluate.sft``, ``metrics``)."""
    raw = "-".join(p for p in parts if p).lower()
    return "-".join(w for w in "".join(c if c.isalnum() else "-" for c in raw).split("-") if w)


def scope_of(flow: str, config_path: str) -> str:
    """The artifact-key scope of a flow run: the flow and its profile (``nightly-demo``)."""
    return artifact_key(flow, PurePath(config_path).stem)


def _description(step: Step, fact: Fact) -> str:
    """The fact's description, naming the step (two evaluations of a run read apart)."""
    return f"`{step.name}`: {fact.description}" if fact.description else f"`{step.name}`"


def page_markdown(page: Page) -> str:
    """The markdown artifact of a committed HTML page: where to open it, then the page itself (or,
    when the page cannot be read, the one line saying why: publishing never fails the step)."""
    uri = io.join(page.uri, page.relpath)
    try:
        url = io.browser_url(uri)
        text = io.read_file(page.uri, page.relpath).decode()
    except io.ArtifactError as e:
        return f"The report `{uri}` cannot be shown: {describe(e)}"
    if url.startswith("file://"):
        where = (
            f"Full report: `{url}` (a local store: open it in a browser on the machine that holds the "
            "store; on S3 this is a link). Shown below as the UI renders it."
        )
    elif url == uri:  # already a web address
        where = f"[Open the full report]({url})"
    else:
        days = io.LINK_EXPIRES_S // 86400
        where = f"[Open the full report]({url}) (`{uri}`: presigned, valid {days} days from publishing)"
    if len(text) > MAX_PAGE_CHARS:
        return f"{where}\n\nThe report ({len(text) // 1000:,} KB) is too large to show here."
    folder = posixpath.dirname(uri)
    return f"{where}\n\n---\n\n" + pages.in_markdown(text, lambda rel: io.browser_url(io.join(folder, rel)))


def publish(step: Step, result: StepResult, scope: str = "") -> None:
    """The stage's Prefect artifacts for a built or reused step; ``scope`` (the flow and its profile,
    :func:`scope_of`) prefixes their keys so runs of other flows and profiles keep their own."""

    for fact in facts(step.stage, result).items:
        key, description = artifact_key(scope, step.name, fact.what), _description(step, fact)
        if isinstance(fact, Table):
            create_table_artifact(key=key, table=[dict(row) for row in fact.rows], description=description)
        elif isinstance(fact, Markdown):
            create_markdown_artifact(key=key, markdown=fact.text, description=description)
        elif isinstance(fact, Page):
            create_markdown_artifact(key=key, markdown=page_markdown(fact), description=description)
        else:
            create_link_artifact(key=key, link=fact.url, description=description)


def publish_history(scope: str, name: str, rows: Sequence[NightRow]) -> None:
    """The nightly history of model ``name`` (:mod:`coa.registry.history`): a table with a row per
    night, and the plot of the champion's metric over the nights (``<scope>-history``,
    ``<scope>-history-plot``: one artifact each per deployment, a new version every night)."""
    create_table_artifact(
        key=artifact_key(scope, "history"),
        table=[row.model_dump(mode="json") for row in rows],
        description=f"Nightly history of `{name}`: a row per night",
    )
    figure = pages.figure(history_plot(rows, name), f"the champion of {name} over the nights")
    create_markdown_artifact(
        key=artifact_key(scope, "history-plot"),
        markdown=pages.in_markdown(pages.page(f"Nightly history of {name}", [figure]), lambda rel: rel),
        description=f"`{name}`: the champion's primary metric over the nights, beside each candidate",
    )
