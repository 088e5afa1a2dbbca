"""The evaluation steps' summaries, typed: what :mod:`coa.evaluate.step` reports and lineage stores.

The runner keeps a step's summary as JSON in ``_lineage.json`` (a reused step hands back what was
stored), so readers (the CLI, the Prefect artifacts) parse it with ``from_dict`` and read fields,
never string keys. Reading is tolerant: keys an older artifact did not store take their defaults,
keys it stored that this version no longer reads are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field


class Headline(BaseModel):
    """A report's one-line headline and where the report is (every evaluation step has one)."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # stored JSON of any version reads back

    headline: str = Field(default="", description="The report's headline (markdown); empty: none.")
    report: str | None = Field(default=None, description="The committed HTML report's URI.")

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any]) -> Self:
        """The summary a step result or a stored lineage record holds."""
        return cls.model_validate(dict(summary))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the runner stores in lineage."""
        return self.model_dump(mode="json")


class EvalSummary(Headline):
    """What an evaluation (``evaluate``, or scored prediction files) measured."""

    metrics: dict[str, dict[str, Any]] = Field(description="Family (and ``all``) -> its metrics.")
    benchmarks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Benchmark -> its metrics (pass@1 ± SE, pass@k, maj@K, tokens)."
    )


class EvalReportSummary(Headline):
    """What ``eval-report`` wrote: its headline and report (the fields of :class:`Headline`)."""


class TrainingReportSummary(Headline):
    """What the training report (before/after SFT beside the teacher) compared."""

    comparison: tuple[dict[str, Any], ...] = Field(default=(), description="One row per model compared.")
