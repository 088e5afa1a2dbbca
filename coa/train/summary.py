"""The SFT step's summary, typed: what :func:`coa.train.step.step` reports and lineage stores.

The runner keeps a step's summary as JSON in ``_lineage.json`` (a reused step hands back what was
stored), so readers (the CLI, the Prefect artifacts) parse it with :meth:`SFTSummary.from_dict`
and read fields, never string keys. Reading is tolerant: keys an older artifact did not store take
their defaults, keys it stored that this version no longer reads are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SFTSummary(BaseModel):
    """What an SFT step did, as its lineage records it."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # stored JSON of any version reads back

    steps_planned: int = Field(description="Optimizer steps of the whole plan (the schedule's length).")
    steps_run: int = Field(description="The global step reached (resumed steps included).")
    final_loss: float | None = Field(description="Last logged training loss; None if nothing was logged.")
    tokens_seen: int = Field(description="Non-padding input tokens over the whole run.")
    tokens_per_s: float = Field(description="Training throughput of the last call (tokens per second).")
    device: str = Field(description="Where it trained (cpu, cuda, …).")
    heldout_loss: float | None = Field(default=None, description="Last held-out loss; None without one.")
    n_heldout: int = Field(default=0, description="Examples kept out of training for the held-out loss.")
    overfit_warning: str | None = Field(
        default=None, description="Set when the held-out loss rose while the training loss fell."
    )
    loss_curve: tuple[tuple[int, float], ...] = Field(
        default=(), description="(global step, loss), thinned to about 50 points."
    )

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any]) -> SFTSummary:
        """The summary a step result or a stored lineage record holds."""
        return cls.model_validate(dict(summary))

    def to_dict(self) -> dict[str, Any]:
        """The JSON the runner stores in lineage."""
        return self.model_dump(mode="json")
