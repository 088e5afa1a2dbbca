"""What a stage shows of a step, as plain facts any front end renders (:data:`coa.plan.stages.PRESENTERS`).

A stage turns its typed summary into :class:`Facts`: tables, markdown, links, pages (its committed
HTML reports) and warnings, each named by a short ``what`` (``summary``, ``loss-curve``…). The
Prefect layer makes one Prefect artifact per fact (keyed per flow, profile and step) and logs the
warnings; a notebook or the CLI can print the same facts. No stage knows a front end, and no
front end knows a stage.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Table:
    what: str
    rows: Sequence[Mapping[str, Any]]
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Markdown:
    what: str
    text: str
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Link:
    what: str
    url: str
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Page:
    """An HTML report committed with an artifact (``relpath`` inside the artifact at ``uri``): a front
    end shows it in place (the Prefect layer: its tables and figures as a markdown artifact, with a
    link a browser can open: a presigned https URL on S3), since a ``file://`` or ``s3://`` link is
    no use to a browser on another machine."""

    what: str
    uri: str
    relpath: str
    description: str = ""


Fact = Table | Markdown | Link | Page


@dataclasses.dataclass(frozen=True)
class Facts:
    """What a step shows: its facts in order, and the warnings a reader must not miss."""

    items: tuple[Fact, ...] = ()
    warnings: tuple[str, ...] = ()


def show(value: Any) -> Any:
    """A table cell: ``-`` for a missing value, rounded floats, JSON for structures."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value
