"""The evaluation steps' summaries, typed: what :mod:`coa.evaluate.step` reports and lineage stores.

The build reports it (:meth:`coa.steps.Build.report`), the runner keeps it as JSON in
``_lineage.json`` (a reused step hands back what was stored), readers (the CLI, the Prefect
artifacts) parse it with :meth:`~coa.steps.StepSummary.from_dict` and read fields, never string keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coa.evaluate.compare import Delta
from coa.steps import StepSummary


class Headline(StepSummary):
    """A report's one-line headline and where the report is (every evaluation step has one)."""

    headline: str = Field(default="", description="The report's headline (markdown); empty: none.")
    report: str | None = Field(default=None, description="The committed HTML report's URI.")


class EvalSummary(Headline):
    """What an evaluation (``evaluate``, or scored prediction files) measured."""

    metrics: dict[str, dict[str, Any]] = Field(description="Family (and ``all``) -> its metrics.")
    benchmarks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Benchmark -> its metrics (pass@1 ± SE, pass@k, maj@K, tokens)."
    )


class EvalReportSummary(Headline):
    """What ``eval-report`` wrote: its headline and report, and the tokens against the teacher."""

    tokens_vs_teacher: dict[str, dict[str, Any]] | None = Field(
        default=None, description="Benchmark -> the student's tokens against the teacher's; None: no teacher."
    )


class StepChange(BaseModel):
    """What one training step changed: its model's held-out accuracy against the model it started
    from, paired task by task, per family and over all (:func:`coa.evaluate.compare.compare`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: str = Field(description="The model after the step: `SFT`, `round 2`…, `RL`.")
    against: str = Field(description="The model it started from: `before SFT`, `SFT`, `round 2`….")
    deltas: dict[str, Delta] = Field(description="Family (and `all`) -> the paired delta of accuracy.")


class TrainingReportSummary(Headline):
    """What the training report (before/after SFT beside the teacher) compared."""

    comparison: tuple[dict[str, Any], ...] = Field(default=(), description="One row per model compared.")
    changes: tuple[StepChange, ...] = Field(
        default=(), description="Each training step's paired change, in training order (none stored before)."
    )
