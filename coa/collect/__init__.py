"""The collection stage: the multi-agent teacher solves tasks; every run is a ``trajectory.v1`` row.

``config`` (teacher, endpoints, tools, limits), ``teacher`` (builds the configured teacher),
``runs`` (bounded fan-out with checkpoints, pure of storage layout), ``step`` (the step).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coa.collect.runs import (
        CheckpointFolder,
        CollectionIncomplete,
        CollectOutcome,
        PlannedRun,
        collect_runs,
        plan_runs,
        summarize,
    )

__all__ = [
    "CheckpointFolder",
    "CollectOutcome",
    "CollectionIncomplete",
    "PlannedRun",
    "collect_runs",
    "plan_runs",
    "summarize",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in (
        "CheckpointFolder",
        "CollectionIncomplete",
        "CollectOutcome",
        "PlannedRun",
        "collect_runs",
        "plan_runs",
        "summarize",
    ):
        from coa.collect import runs

        return getattr(runs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
