"""What a run of a plan did, typed: the result the ``pipeline`` flow returns and ``coa run`` prints.

:func:`run_result` reads the finished steps of a plan (``done``: step name → :class:`StepResult`;
the plan's named outputs say which step is the curation and which the training report)
into a :class:`RunResult`: one :class:`StageRow` per step and per table it wrote, then one per
stage the plan has no step for (and why); every step's artifact reference; and the paths and rows
of the reports the steps declared in their typed summaries (curation's report, the training
report's comparison). Readers use its fields, never string keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from coa.config import StrictModel
from coa.evaluate.summary import StepChange
from coa.io import ArtifactRef
from coa.plan.config import PipelineConfig
from coa.plan.pipeline import not_planned
from coa.plan.runner import Plan
from coa.steps import Step, StepResult


class StageRow(StrictModel):
    """One line of a run's stage table: a step (or one more table it wrote), or a stage left out."""

    stage: str = Field(
        description="The step's name (``name.table`` for a step's further tables), or a stage."
    )
    status: str = Field(
        description="built, reused, not run (the run stopped before it), or why the plan has no such step."
    )
    rows: int | None = Field(default=None, description="Rows of the table; None for a stage without one.")
    artifact: str | None = Field(default=None, description="The artifact's URI; None where nothing ran.")
    wall_s: float | None = Field(
        default=None, description="Seconds the build took; None unless built in this run."
    )
    peak_rss_mib: float | None = Field(
        default=None,
        description="Peak resident memory of the process that built it, during the build (MiB); None unless "
        "built in this run (coa.resources).",
    )


class RunResult(StrictModel):
    """What a run of a plan built or reused, and where its reports are."""

    stages: tuple[StageRow, ...] = Field(description="The stage table, in plan order.")
    refs: dict[str, ArtifactRef] = Field(description="Each finished step's artifact, by step name.")
    report: str | None = Field(default=None, description="The curation report's path, when curate ran.")
    training_report: str | None = Field(
        default=None, description="The training report's path, when the report step ran."
    )
    comparison: tuple[dict[str, Any], ...] = Field(
        default=(), description="The training report's rows: one per model and family compared."
    )
    changes: tuple[StepChange, ...] = Field(
        default=(), description="The training report's paired change of each training step."
    )


def stage_rows(
    config: PipelineConfig, steps: Sequence[Step], done: Mapping[str, StepResult]
) -> list[StageRow]:
    """One row per step and per table it wrote (rows, artifact), then the stages without a step."""
    out: list[StageRow] = []
    for step in steps:
        result = done.get(step.name)
        if result is None:
            out.append(StageRow(stage=step.name, status="not run"))
            continue
        status = "reused" if result.reused else "built"
        used = None if result.reused else result.resources
        primary = result.ref.primary
        tables = ([primary] if primary else []) + sorted(t for t in result.ref.tables if t != primary)
        for i, table in enumerate(tables or [None]):
            metered = used if i == 0 else None  # the build's figures once, on the step's first row
            out.append(
                StageRow(
                    stage=step.name if i == 0 else f"{step.name}.{table}",
                    status=status,
                    rows=None if table is None else result.ref.rows(table),
                    artifact=result.ref.uri,
                    wall_s=None if metered is None else round(metered.wall_s, 1),
                    peak_rss_mib=None if metered is None else metered.peak_rss_mib,
                )
            )
    out += [StageRow(stage=stage, status=why) for stage, why in not_planned(config, steps).items()]
    return out


def run_result(config: PipelineConfig, plan: Plan, done: Mapping[str, StepResult]) -> RunResult:
    """The :class:`RunResult` of the finished steps ``done`` of ``plan``."""
    curated, trained = _summary(plan.curated, done), _summary(plan.report, done)
    return RunResult(
        stages=tuple(stage_rows(config, plan, done)),
        refs={name: result.ref for name, result in done.items()},
        report=getattr(curated, "report", None),
        training_report=getattr(trained, "report", None),
        comparison=getattr(trained, "comparison", ()),
        changes=getattr(trained, "changes", ()),
    )


def _summary(step: Step | None, done: Mapping[str, StepResult]) -> Any:
    """The typed summary of ``step``, read through its stage (None when it did not run)."""
    if step is None or step.name not in done or step.stage.summary is None:
        return None
    return step.stage.summary.from_dict(done[step.name].summary)
