"""Links to the page a step committed with its artifact (:mod:`coa.view.commit`), for its Prefect
artifacts and the CLI: the whole page, or the page opened on a filter (its address's fragment:
``episodes.html#verdict=fail``, ``#kind=quarantined&reason=exact_duplicate``).

A link a browser can open (:func:`coa.io.browser_url`): presigned on S3 (the fragment stays outside
the signature), ``file://`` for a local store (opened on the machine that holds it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from urllib.parse import urlencode

from coa import io
from coa.facts import Link, Markdown
from coa.view.commit import LINEAGE_KEY, PAGE_FILE


@dataclasses.dataclass(frozen=True)
class Committed:
    """What the page committed with an artifact shows (its lineage's ``episodes_page``)."""

    shown: int
    total: int
    teacher: str | None

    def __str__(self) -> str:
        beside = ", each beside the teacher's runs on its task" if self.teacher else ""
        if self.shown >= self.total:
            return f"all {self.total:,} episodes{beside}"
        return f"a sample of {self.shown:,} of {self.total:,} episodes, evenly spaced over the rows{beside}"


def committed(ref: io.ArtifactRef) -> Committed | None:
    """What the page committed with ``ref`` shows; None without one."""
    if PAGE_FILE not in ref.files:
        return None
    page = io.read_lineage(ref).get(LINEAGE_KEY) or {}
    return Committed(int(page.get("shown", 0)), int(page.get("total", 0)), page.get("teacher"))


def page_url(ref: io.ArtifactRef, **filters: str) -> str:
    """A URL of the committed page a browser opens, on ``filters`` (the page's fragment keys)."""
    uri = io.join(ref.uri, PAGE_FILE)
    try:
        url = io.browser_url(uri)
    except io.ArtifactError:
        url = uri  # a store that cannot sign a link: its address, to open with its own client
    return f"{url}#{urlencode(filters)}" if filters else url


def page_link(ref: io.ArtifactRef) -> Link | None:
    """The ``episodes`` link fact of an artifact with a page (None without one)."""
    page = committed(ref)
    if page is None:
        return None
    return Link("episodes", page_url(ref), f"Episodes in the trajectory viewer ({page})")


def sample_links(
    ref: io.ArtifactRef, what: str, views: Sequence[tuple[str, dict[str, str]]]
) -> Markdown | None:
    """A markdown fact (``episodes-sample``) linking ``views`` of the page: (label, its filters) each,
    e.g. ``("failed", {"verdict": "fail"})``; None when ``ref`` has no page."""
    page = committed(ref)
    if page is None:
        return None
    items = "\n".join(f"- [{label}]({page_url(ref, **filters)})" for label, filters in views)
    return Markdown(
        "episodes-sample",
        f"{what} in the trajectory viewer ({page}):\n\n{items}\n",
        f"{what}: links into the trajectory viewer",
    )
