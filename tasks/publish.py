"""Prefect artifacts of a step: what its stage presents (:data:`coa.plan.stages.PRESENTERS`), one
artifact per fact, small, keyed per step, described. One publisher for every stage: it knows none.

Keys are unique per flow, profile and step (``pipeline-demo-collect-summary`` and
``pipeline-demo-collect-heldout-summary`` are two artifacts; ``nightly-demo-…`` keeps its own);
tables rather than code blocks (the UI clips wide code); links point at the committed artifact
(its store URI), never at a temporary folder.
"""

from __future__ import annotations

from pathlib import PurePath

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from coa.facts import Fact, Markdown, Table
from coa.plan.stages import facts
from coa.steps import Step, StepResult


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


def publish(step: Step, result: StepResult, scope: str = "") -> None:
    """The stage's Prefect artifacts for a built or reused step; ``scope`` (the flow and its profile,
    :func:`scope_of`) prefixes their keys so runs of other flows and profiles keep their own."""

    for fact in facts(step.stage, result).items:
        key, description = artifact_key(scope, step.name, fact.what), _description(step, fact)
        if isinstance(fact, Table):
            create_table_artifact(key=key, table=[dict(row) for row in fact.rows], description=description)
        elif isinstance(fact, Markdown):
            create_markdown_artifact(key=key, markdown=fact.text, description=description)
        else:
            create_link_artifact(key=key, link=fact.url, description=description)
