"""The nightly stages' configs: each holds the one rule its stage applies, fixed (the plan sets
nothing else), so that the rule is part of the step's key and its lineage says it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel


class NewTasksConfig(StrictModel):
    """``nightly.new_tasks``: what is left out of tonight's tasks."""

    exclude: Literal["task ids of earlier nights' collections"] = Field(
        default="task ids of earlier nights' collections",
        description="Tasks left out: those whose id an earlier night's collection (an input) holds.",
    )


class MergeConfig(StrictModel):
    """``nightly.merge``: how tonight's runs and tasks join the earlier nights'."""

    dedup: tuple[Literal["run_id"], Literal["task_id"]] = Field(
        default=("run_id", "task_id"),
        description="The ids a row is kept once by: a run by its run_id, a task by its task_id.",
    )
