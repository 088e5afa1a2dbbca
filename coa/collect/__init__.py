"""The collection stage: the multi-agent teacher solves tasks; every run is a ``trajectory.v1`` row.

``config`` (teacher, endpoints, tools, limits), ``teacher`` (builds the configured teacher),
``runs`` (bounded fan-out with checkpoints, pure of storage layout), ``step`` (the step).
"""

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
