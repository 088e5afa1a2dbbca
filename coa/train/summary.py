"""The SFT step's summary, typed: what :func:`coa.train.step.step` reports and lineage stores.

The build reports it (:meth:`coa.steps.Build.report`), the runner keeps it as JSON in
``_lineage.json`` (a reused step hands back what was stored), readers (the CLI, the Prefect
artifacts) parse it with :meth:`~coa.steps.StepSummary.from_dict` and read fields, never string keys.
"""

from __future__ import annotations

from pydantic import Field

from coa.steps import StepSummary


class SFTSummary(StepSummary):
    """What an SFT step did, as its lineage records it."""

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
