"""What a front end shows of a task import (:data:`coa.plan.stages.PRESENTERS`): rows per source.

Kept out of the step's module, which never imports it: the import's key hashes the code its build
reaches (:meth:`coa.steps.Stage.code_files`), so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

from coa.facts import Fact, Facts, Markdown, Table
from coa.steps import StepResult
from coa.tasksets.step import TasksSummary


def present(s: TasksSummary, result: StepResult) -> Facts:
    """One row per source (layout, rows read, imported, quarantined) and where the quarantine is."""
    rows = [
        {
            "source": src.name,
            "layout": src.layout,
            "read": src.rows_read,
            "ok": src.rows_ok,
            "quarantined": src.rows_quarantined,
        }
        for src in s.sources
    ]
    items: list[Fact] = [Table("sources", rows, f"Imported into {result.ref.uri}")]
    if s.quarantined:
        items.append(
            Markdown(
                "quarantine",
                f"{s.quarantined} row(s) quarantined; see `coa show {result.ref.uri} --table quarantine`",
            )
        )
    return Facts(tuple(items))
