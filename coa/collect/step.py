"""The collection step: the teacher on every task of a table → a committed ``trajectory.v1`` artifact.

Finished runs are checkpointed under ``{root}/checkpoints/trajectories/<name>-<key>`` while it
runs; a rerun after a crash, a kill or a spent budget resumes from them (the summary says how many
runs it reused), and the folder is removed once the artifact is committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath

import pyarrow.parquet as pq

import schemas
from coa.collect.config import CollectConfig
from coa.collect.runs import (
    CheckpointFolder,
    CollectionIncomplete,
    CollectOutcome,
    collect_runs,
    plan_runs,
    summarize,
)
from coa.collect.teacher import open_teacher
from coa.steps import Build, Step, StepInput

TABLE = "trajectories"


def step(config: CollectConfig, tasks: StepInput, name: str = "collect") -> Step:
    """Collect ``config.samples_per_task`` teacher runs per task of ``tasks``."""
    return Step(
        name=name,
        kind="trajectories",
        artifact=config.name,
        config=config,
        build=_build,
        inputs={"tasks": tasks},
        describe="teacher runs (multi-agent, real tools)",
        expects={"tasks": "task.v1"},
        produces={TABLE: "trajectory.v1"},
    )


def _build(b: Build) -> None:
    config: CollectConfig = b.step.config
    tasks = b.table("tasks").read()
    if config.limit is not None:
        tasks = tasks.slice(0, config.limit)
    planned = plan_runs(tasks, config.samples_per_task)
    checkpoints = CheckpointFolder(b.store.checkpoint_uri(b.writer.uri))

    async def run() -> CollectOutcome:
        async with open_teacher(config, b.store.root) as teacher:
            return await collect_runs(teacher, planned, checkpoints, config.concurrency, b.progress)

    outcome = asyncio.run(run())
    if outcome.budget_stopped:
        raise CollectionIncomplete(
            f"the LLM budget ran out after {outcome.resumed + outcome.ran} of {outcome.planned} runs; "
            "they are checkpointed: raise collect.llm.budget_tokens / budget_usd and rerun to finish"
        )
    with b.writer.table_writer(TABLE, schemas.TRAJECTORY) as write:
        for part in checkpoints.read([p.run_id for p in planned]):  # one row group per 256 runs
            write(part)
    b.writer.extra_lineage["collect"] = dataclasses.asdict(outcome)
    b.summary.update(summarize_rows(b), collect=dataclasses.asdict(outcome))
    b.cleanup.append(checkpoints.remove)


def summarize_rows(b: Build) -> dict[str, object]:
    """The headline numbers of what was just staged (read back from the checkpoints' rows)."""
    fs, path = b.writer.fs, posixpath.join(b.writer.staging, f"{TABLE}.parquet")
    with fs.open(path, "rb") as fh:
        return summarize(schemas.TRAJECTORY.conform(pq.read_table(fh)))
