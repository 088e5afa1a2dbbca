"""What a step reports, typed: the base of every stage's summary (:class:`StepSummary`).

The runner (:mod:`coa.steps`) stores it in ``_lineage.json`` and hands it back in a step result;
readers parse it with :meth:`StepSummary.from_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict


class StepSummary(BaseModel):
    """What a step reports, typed: each stage declares its subclass beside its step.

    A build hands its summary to :meth:`Build.report`; the runner serializes it once
    (:meth:`to_dict`) into ``_lineage.json`` and the :class:`StepResult`, so a fresh build and a
    reused one give readers the same JSON, which they parse with :meth:`from_dict` and read by field.

    Reading is tolerant: keys an older artifact did not store take their defaults, keys it stored
    that this version no longer reads are ignored. Writing stores the fields the build set (a field
    left at its default is not written), so the stored JSON is what the step reported, as before the
    summaries were typed.
    """

    # stored JSON of any version reads back; a NaN metric is stored as NaN (as json.dumps writes it)
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="constants")

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any]) -> Self:
        """The summary a step result or a stored lineage record holds."""
        return cls.model_validate(dict(summary))

    def to_dict(self, exclude: set[str] | None = None) -> dict[str, Any]:
        """The JSON the runner stores in lineage: the fields the build set (less ``exclude``)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude=exclude)
