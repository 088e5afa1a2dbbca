"""The task-import step: the configured task files read into one ``task.v1`` artifact.

Its identity is the config and the sha256 of every input file, so the CLI (``coa tasks import``)
and the flow give the same artifact for the same files.
"""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field

import schemas
from coa import io
from coa.steps import Build, Stage, Step, StepSummary
from coa.tasksets.config import TasksConfig
from coa.tasksets.importer import ProgressFn, TaskImportError, import_tasks


class ImportedSource(BaseModel):
    """What one source contributed (:class:`coa.tasksets.importer.SourceSummary`, as stored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(description="The source's name (the prefix of its task ids).")
    path: str = Field(description="The file or folder it was read from.")
    layout: str = Field(description="The layout recognised (a benchmark's own, or plain question/answer).")
    rows_read: int = Field(description="Rows read (rows_ok + rows_quarantined).")
    rows_ok: int = Field(description="Rows imported as tasks.")
    rows_quarantined: int = Field(description="Rows set aside, each with its reason.")
    rows_skipped_by_limit: int = Field(default=0, description="Usable rows past the source's limit.")


class TasksSummary(StepSummary):
    """What a task import did, as its lineage records it (the runner stores it as JSON; readers parse
    it with :meth:`from_dict`: keys an older artifact did not store take their defaults, keys this
    version no longer reads are ignored)."""

    sources: tuple[ImportedSource, ...] = Field(default=(), description="Per source, in order.")
    tasks: int = Field(default=0, description="Tasks imported.")
    quarantined: int = Field(default=0, description="Rows quarantined.")


def step(config: TasksConfig, name: str = "tasks") -> Step:
    """The import step of ``config.sources`` (their files are hashed now, for the key)."""
    if not config.sources:
        raise TaskImportError("tasks.sources is empty: add at least one task file (see configs/demo.yaml)")
    return STAGE.step(config, name=name, identity=identify(config))


def identify(config: TasksConfig) -> dict[str, list[str]]:
    """The task files' hashes (what else decides the content): recomputed where a spec is rebuilt."""
    try:
        return {"input_sha256": [io.path_fingerprint(s.path) for s in config.sources]}
    except FileNotFoundError as e:
        raise TaskImportError(f"{e}; check tasks.sources (paths are relative to where you run)") from None


def _build(b: Build) -> None:
    config: TasksConfig = b.step.config
    result = import_tasks(config.sources, progress=_per_source(b))
    b.writer.extra_lineage["sources"] = [dataclasses.asdict(s) for s in result.sources]
    b.writer.write_table("tasks", result.tasks, schemas.TASK)
    b.writer.write_table("quarantine", result.quarantine, schemas.QUARANTINE)
    b.report(
        TasksSummary(
            sources=tuple(ImportedSource(**dataclasses.asdict(s)) for s in result.sources),
            tasks=result.tasks.num_rows,
            quarantined=result.quarantine.num_rows,
        )
    )


def _per_source(b: Build) -> ProgressFn | None:
    if b.progress is None:
        return None
    report = b.progress
    return lambda _source, done, total: report(done, total)


STAGE = Stage(
    name="tasks",
    kind="tasks",
    build=_build,
    config=TasksConfig,
    produces={"tasks": "task.v1", "quarantine": "quarantine.v1"},
    summary=TasksSummary,
    identify=identify,
    describe="import task files into task.v1",
)
