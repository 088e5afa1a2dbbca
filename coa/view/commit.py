"""The viewer's page committed with a step's artifact: ``episodes.html``, a sample of its episodes.

The runner calls :func:`commit_page` after a step's build and before its commit (``run_step(...,
finish=commit_page)``: the CLI, the Prefect task, a GPU worker's plan runner), so the page is staged
and committed with the artifact's tables, all or nothing. It is written for every artifact that
holds episodes (collected or curated runs with their quarantine, CoA SFT examples, RL and sampled
rollouts, evaluations): at most :data:`SAMPLE_CAP` of them, evenly spaced over the rows (the page
says so, with the total, when it shows a sample). It is the runner's hook, not the stages': no
step's build imports the viewer, so no step key hashes it and a change of the page rebuilds
nothing; an artifact keeps the page it was committed with (``coa view URI`` writes a fresh one, up
to 20,000 episodes).

What the page holds goes into the artifact's lineage (``episodes_page``: file, shown, total, teacher): the
steps' Prefect artifacts link it (:func:`coa.view.links.page_link`) and say how many it shows.
"""

from __future__ import annotations

import posixpath
import time

import schemas
from coa import io
from coa.view.episodes import EPISODE_SCHEMAS, Staged, View, from_tables, load
from coa.view.page import render

PAGE_FILE = "episodes.html"
"""The page's file in the artifact."""
SAMPLE_CAP = 2_000
"""The most episodes a committed page holds (about 10 MB of page; ``coa view --cap`` gives more)."""
LINEAGE_KEY = "episodes_page"
"""The lineage entry that records the page: ``{"file", "shown", "total", "teacher", "bytes",
"seconds"}`` (the teacher's runs shown beside the episodes, or null; what the page cost the step)."""
PRIMARY = (schemas.TRAJECTORY.id, schemas.SFT.id, schemas.ROLLOUT.id, schemas.EVAL.id)
"""An artifact holding a table of one of these gets a page (a quarantine alone, a task set's, does not)."""


EVALUATED = ("candidate", "after_rl", "after", "before")
"""The input roles of an evaluation report that name the evaluation it reports, first found first:
the evaluation report's ``candidate``, the training report's last evaluation."""


def commit_page(writer: io.ArtifactWriter, cap: int = SAMPLE_CAP) -> int | None:
    """Stage ``episodes.html`` and record it in the lineage: a sample of at most ``cap`` of the
    episodes ``writer`` staged, or for a report of an evaluation beside the teacher's runs (inputs
    ``teacher`` and one of :data:`EVALUATED`), that evaluation's episodes each beside the teacher's on
    the same task. The episodes shown, or None when there are none to show."""
    started = time.perf_counter()
    view = _own(writer, cap) or _paired(writer, cap)
    if view is None:
        return None
    text = render(view).encode()
    writer.write_file(PAGE_FILE, text)
    writer.extra_lineage[LINEAGE_KEY] = {
        "file": PAGE_FILE,
        "shown": len(view.episodes),
        "total": view.total,
        "teacher": view.teacher_uri or None,
        "bytes": len(text),
        "seconds": round(time.perf_counter() - started, 3),
    }
    return len(view.episodes)


def _own(writer: io.ArtifactWriter, cap: int) -> View | None:
    """The page of the episodes the build staged (None when it staged none)."""
    tables = {
        name: (str(info["schema_id"]), Staged(writer.fs, posixpath.join(writer.staging, info["files"][0])))
        for name, info in writer.tables.items()
    }
    if not any(sid in PRIMARY for sid, _ in tables.values()):
        return None
    if not any(info["rows"] for info in writer.tables.values() if info["schema_id"] in EPISODE_SCHEMAS):
        return None
    return from_tables(writer.uri, tables, lambda: writer.upstream, cap)


def _paired(writer: io.ArtifactWriter, cap: int) -> View | None:
    """The page of the evaluation a report reads, beside the teacher's runs (None for other steps)."""
    inputs = writer.extra_lineage.get("inputs") or {}
    evaluated = next((inputs[r]["uri"] for r in EVALUATED if inputs.get(r, {}).get("table")), None)
    teacher = inputs.get("teacher", {}).get("uri")
    if evaluated is None or teacher is None:
        return None
    return load(evaluated, teacher, cap)
