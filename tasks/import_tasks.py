"""Prefect task: import the configured task sets into a content-addressed ``task.v1`` artifact."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

import schemas
from coa import io
from coa.config import TasksConfig
from coa.tasksets import import_tasks


@task(name="import-tasks")
def import_tasks_task(cfg: TasksConfig) -> io.ArtifactRef:
    """Read every source through its layout, write tasks + quarantine, return the reference."""
    logger = get_run_logger()
    if not cfg.sources:
        raise ValueError(
            "tasks.sources is empty: add at least one task file to the config (see configs/demo.yaml)"
        )
    inputs = [io.path_fingerprint(s.path) for s in cfg.sources]
    writer = io.Store().writer("tasks", cfg.name, {"stage": cfg.model_dump(mode="json"), "inputs": inputs})
    existing = writer.existing()
    if existing is not None:
        logger.info("tasks: reusing committed artifact %s (%d tasks)", existing.uri, existing.rows("tasks"))
        return existing
    result = import_tasks(cfg.sources)
    writer.extra_lineage["sources"] = [s.__dict__ for s in result.sources]
    writer.write_table("tasks", result.tasks, schemas.TASK)
    writer.write_table("quarantine", result.quarantine, schemas.QUARANTINE)
    ref = writer.commit()
    create_table_artifact(
        key="tasks-import",
        table=[
            {
                "source": s.name,
                "layout": s.layout,
                "read": s.rows_read,
                "ok": s.rows_ok,
                "quarantined": s.rows_quarantined,
            }
            for s in result.sources
        ],
        description=f"Task import into {ref.uri}",
    )
    logger.info(
        "tasks: %d imported, %d quarantined -> %s", ref.rows("tasks"), ref.rows("quarantine"), ref.uri
    )
    return ref
