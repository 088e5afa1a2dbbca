"""The collection step's summary, typed: what :mod:`coa.collect.step` reports and lineage stores.

The build reports it (:meth:`coa.steps.Build.report`), the runner keeps it as JSON in
``_lineage.json`` (a reused step hands back what was stored), readers (the CLI, the Prefect
artifacts) parse it with :meth:`~coa.steps.StepSummary.from_dict` and read fields, never string keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from coa.steps import StepSummary


class Outcome(BaseModel):
    """What this call of the collection did (:class:`coa.collect.runs.CollectOutcome`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    planned: int = Field(description="Runs planned.")
    resumed: int = Field(description="Runs found already checkpointed (from a crashed or killed call).")
    ran: int = Field(description="Runs made in this call.")
    budget_stopped: bool = Field(description="Whether the LLM budget stopped it before every run finished.")


class Repair(BaseModel):
    """What a retry of the failed runs (``coa collect --retry-failed``) did."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    of: str = Field(description="The collection whose failed runs were retried.")
    retried: int = Field(description="Failed runs retried.")
    still_failed: int = Field(description="Retried runs that failed again.")
    resumed: int = Field(description="Retried runs found already checkpointed.")
    requests_sent: int = Field(description="LLM requests sent by the retry.")


class CollectSummary(StepSummary):
    """What a collection step did, as its lineage records it (:func:`coa.collect.runs.summarize`
    of the committed table, with this call's outcome)."""

    runs: int = Field(description="Runs in the table.")
    completed: int = Field(description="Runs that ended with an answer.")
    completion_rate: float = Field(description="completed / runs.")
    accuracy: float | None = Field(description="Share of scored runs that were correct; None if none scored.")
    statuses: dict[str, int] = Field(description="Runs per status.")
    failed_share: float = Field(
        default=0.0,
        description="Share of runs that ended in an infrastructure error (not those the model failed by "
        "answering off the agents' protocol: they count under statuses.error only).",
    )
    prompt_tokens: int = Field(description="Prompt tokens over every run.")
    completion_tokens: int = Field(description="Completion tokens over every run.")
    tool_calls: dict[str, int] = Field(description="Tool calls per tool.")
    cost_usd: float | None = Field(description="Cost of the runs; None without prices.")
    errors_by_kind: dict[str, int] = Field(description="Step errors per kind (the text before the colon).")
    collect: Outcome | None = Field(default=None, description="What this call did (resumed runs, …).")
    warnings: tuple[str, ...] = Field(default=(), description="E.g. families a task limit left out.")
    repaired: Repair | None = Field(default=None, description="Set on a retry of the failed runs.")
