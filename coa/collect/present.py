"""What a front end shows of a collection step (:data:`coa.plan.stages.PRESENTERS`): its figures as a table.

Kept out of the step's module, which never imports it: the collection key hashes the code its build
reaches (:meth:`coa.steps.Stage.code_files`), so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

from coa.collect.summary import CollectSummary
from coa.facts import Facts, Table, show
from coa.steps import StepResult


def present(s: CollectSummary, result: StepResult) -> Facts:
    """The collection's figures, counts and warnings as one table."""
    keys = (
        "runs",
        "completed",
        "completion_rate",
        "accuracy",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    )
    rows = [{"metric": k, "value": show(getattr(s, k))} for k in keys]
    resumed = s.collect.resumed if s.collect else None
    rows.append({"metric": "runs resumed from checkpoints", "value": show(resumed)})
    rows += [
        {"metric": k, "value": show(getattr(s, k))} for k in ("statuses", "tool_calls", "errors_by_kind")
    ]
    rows += [{"metric": "warning", "value": w} for w in s.warnings]
    if s.repaired:
        rows.append({"metric": "repaired (retry of failed runs)", "value": show(s.repaired.model_dump())})
    return Facts((Table("summary", rows, f"Teacher collection: {result.ref.uri}"),))
