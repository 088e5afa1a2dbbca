"""The nightly stages: the tasks no earlier night collected, and tonight's data with the earlier nights'.

* ``nightly.new_tasks``: only the tasks of tonight's source whose ids none of the earlier nights'
  collections holds (those collections are inputs, so its key and lineage name them);
* ``nightly.merge``: tonight's runs and tasks with the earlier nights' ones (one ``trajectories`` and
  one ``tasks`` table; a run or task id seen twice is kept once), so curation's dedup and
  decontamination work across nights.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

import schemas
from coa.nightly.config import MergeConfig, NewTasksConfig
from coa.steps import Build, Stage, Step, StepInput, StepSummary

NEW_TASKS = "nightly.new_tasks"
MERGE = "nightly.merge"


# -- nightly.new_tasks ---------------------------------------------------------------------------


class NewTasksSummary(StepSummary):
    """What ``nightly.new_tasks`` kept of the tasks offered."""

    offered: int = Field(description="Tasks of tonight's task source.")
    collected_before: int = Field(description="Of them, tasks an earlier night collected.")
    new: int = Field(description="Tasks no earlier night collected (tonight's collection runs these).")


def new_tasks_step(tasks: StepInput, previous: Mapping[str, StepInput]) -> Step:
    """The tasks of ``tasks`` whose ids none of the ``previous`` collections (night → its
    ``trajectories``) holds."""
    inputs: dict[str, StepInput | None] = {"tasks": tasks}
    inputs.update(previous)
    return NEW_TASKS_STAGE.step(NewTasksConfig(), inputs, artifact="new-tasks")


def _build_new_tasks(b: Build) -> None:
    tasks = b.table("tasks").read()
    seen: set[str] = set()
    for role in b.inputs:
        if role != "tasks":
            seen.update(b.table(role).read(columns=["task_id"]).column("task_id").to_pylist())
    keep = pc.invert(pc.is_in(tasks["task_id"], pa.array(sorted(seen), pa.string())))
    fresh = tasks.filter(keep)
    b.writer.write_table("tasks", fresh, schemas.TASK)
    b.report(
        NewTasksSummary(
            offered=tasks.num_rows, collected_before=tasks.num_rows - fresh.num_rows, new=fresh.num_rows
        )
    )


# -- nightly.merge -------------------------------------------------------------------------------


class MergeSummary(StepSummary):
    """What ``nightly.merge`` put together."""

    nights: int = Field(description="Collections merged (tonight's and the earlier nights').")
    runs: int = Field(description="Runs of the merged table (a run id kept once).")
    tasks: int = Field(description="Tasks of the merged table (a task id kept once).")
    tonight: int = Field(description="Runs collected tonight.")


def merge_step(
    raw: StepInput,
    tasks: StepInput,
    previous: Mapping[str, StepInput],
    previous_tasks: Mapping[str, StepInput],
) -> Step:
    """Tonight's runs and tasks (``raw``, ``tasks``) with the earlier nights' ones (``previous``:
    night → its collection, ``previous_tasks``: night → its tasks); a run or task id kept once."""
    inputs: dict[str, StepInput | None] = {"raw": raw, "tasks": tasks}
    inputs.update({f"{role}.raw": value for role, value in previous.items()})
    inputs.update({f"{role}.tasks": value for role, value in previous_tasks.items()})
    return MERGE_STAGE.step(MergeConfig(), inputs, artifact="nightly-merged")


def _concat_unique(tables: list[pa.Table], key: str) -> pa.Table:
    seen: set[str] = set()
    parts = []
    for table in tables:
        ids = table.column(key).to_pylist()
        mask = []
        for value in ids:
            mask.append(value not in seen)
            seen.add(value)
        parts.append(table.filter(pa.array(mask, pa.bool_())))
    return pa.concat_tables(parts)


def _build_merge(b: Build) -> None:
    runs = [b.table(r).read() for r in sorted(b.inputs) if r == "raw" or r.endswith(".raw")]
    tasks = [b.table(r).read() for r in sorted(b.inputs) if r == "tasks" or r.endswith(".tasks")]
    merged_runs, merged_tasks = _concat_unique(runs, "run_id"), _concat_unique(tasks, "task_id")
    b.writer.write_table("trajectories", merged_runs, schemas.TRAJECTORY)
    b.writer.write_table("tasks", merged_tasks, schemas.TASK)
    b.report(
        MergeSummary(
            nights=len(runs),
            runs=merged_runs.num_rows,
            tasks=merged_tasks.num_rows,
            tonight=b.table("raw").rows(),
        )
    )


NEW_TASKS_STAGE = Stage(
    name=NEW_TASKS,
    kind="tasks",
    build=_build_new_tasks,
    config=NewTasksConfig,
    expects={"tasks": "task.v1", "*": "trajectory.v1"},
    produces={"tasks": "task.v1"},
    summary=NewTasksSummary,
    describe="tasks not collected on an earlier night",
)
MERGE_STAGE = Stage(
    name=MERGE,
    kind="trajectories",
    build=_build_merge,
    config=MergeConfig,
    expects={"*tasks": "task.v1", "*": "trajectory.v1"},
    produces={"trajectories": "trajectory.v1", "tasks": "task.v1"},
    summary=MergeSummary,
    describe="tonight's and earlier nights' runs and tasks, together",
)
