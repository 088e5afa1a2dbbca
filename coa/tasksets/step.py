"""The task-import step: the configured task files read into one ``task.v1`` artifact.

Its identity is the config and the sha256 of every input file, so the CLI (``coa tasks import``)
and the flow give the same artifact for the same files.
"""

from __future__ import annotations

import dataclasses

import schemas
from coa import io
from coa.steps import Build, Step
from coa.tasksets.config import TasksConfig
from coa.tasksets.importer import ProgressFn, TaskImportError, import_tasks


def step(config: TasksConfig, name: str = "tasks") -> Step:
    """The import step of ``config.sources`` (their files are hashed now, for the key)."""
    if not config.sources:
        raise TaskImportError("tasks.sources is empty: add at least one task file (see configs/demo.yaml)")
    try:
        fingerprints = [io.path_fingerprint(s.path) for s in config.sources]
    except FileNotFoundError as e:
        raise TaskImportError(f"{e}; check tasks.sources (paths are relative to where you run)") from None
    return Step(
        name=name,
        builder="tasks",
        kind="tasks",
        artifact=config.name,
        config=config,
        build=_build,
        identity={"input_sha256": fingerprints},
        describe="import task files into task.v1",
        produces={"tasks": "task.v1", "quarantine": "quarantine.v1"},
    )


def _build(b: Build) -> None:
    config: TasksConfig = b.step.config
    result = import_tasks(config.sources, progress=_per_source(b))
    b.writer.extra_lineage["sources"] = [dataclasses.asdict(s) for s in result.sources]
    b.writer.write_table("tasks", result.tasks, schemas.TASK)
    b.writer.write_table("quarantine", result.quarantine, schemas.QUARANTINE)
    b.summary["sources"] = [dataclasses.asdict(s) for s in result.sources]
    b.summary["tasks"], b.summary["quarantined"] = result.tasks.num_rows, result.quarantine.num_rows


def _per_source(b: Build) -> ProgressFn | None:
    if b.progress is None:
        return None
    report = b.progress
    return lambda _source, done, total: report(done, total)
