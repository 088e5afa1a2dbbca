"""The sampling step's summary, typed: what :mod:`coa.sample.step` reports and lineage stores.

The build reports it (:meth:`coa.steps.Build.report`); readers parse the stored JSON with
:meth:`~coa.steps.StepSummary.from_dict` and read fields; keys an older artifact did not store take
their defaults, keys this version no longer reads are ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from coa.steps import StepSummary


class FamilySamples(BaseModel):
    """The student's attempts at one family's training tasks (or ``all``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tasks: int = Field(description="Training tasks sampled.")
    episodes: int = Field(description="Episodes run (tasks x samples).")
    correct: float = Field(description="Share of episodes whose answer passed the task's check.")
    format_valid: float = Field(description="Share of episodes valid under their variant's grammar.")
    kept: int = Field(description="Episodes correct and format-valid: what curation may keep.")
    tasks_solved: float = Field(description="Share of tasks with at least one kept episode (pass@k).")
    all_correct: float = Field(
        default=0.0,
        description="Share of tasks whose every episode is correct: a GRPO group of them has no advantage.",
    )
    all_wrong: float = Field(
        default=0.0, description="Share of tasks with no correct episode: nothing for GRPO to reinforce."
    )

    @property
    def mixed(self) -> float:
        """Share of tasks solved sometimes: the groups GRPO learns from (at k = its group size)."""
        return max(0.0, 1.0 - self.all_correct - self.all_wrong)


class SampleSummary(StepSummary):
    """What a sampling step did: the round, the model, per-family counts."""

    round: int = Field(description="The round of the model that sampled (its SFT round).")
    model: str = Field(description="The model sampled (its artifact URI or name).")
    families: dict[str, FamilySamples] = Field(description="Family (and ``all``) -> its counts.")
