"""Prefect task: build the synthetic task families (train + held-out) as one ``task.v1`` artifact."""

from __future__ import annotations

from prefect import get_run_logger, task

import schemas
from coa import io
from coa.synthetic import SyntheticConfig, generate_all


@task(name="synthetic-tasks")
def synthetic_tasks_task(cfg: SyntheticConfig) -> io.ArtifactRef:
    """Tables ``train`` and ``heldout`` (disjoint questions), content-addressed by the config."""
    logger = get_run_logger()
    writer = io.Store().writer("tasks", "synthetic", cfg.model_dump(mode="json"))
    existing = writer.existing()
    if existing is not None:
        logger.info("synthetic tasks: reusing %s", existing.uri)
        return existing
    tables = generate_all(cfg)
    for split in ("train", "heldout"):
        writer.write_table(split, tables[split], schemas.TASK)
    ref = writer.commit()
    logger.info(
        "synthetic tasks: %d train, %d held-out -> %s", ref.rows("train"), ref.rows("heldout"), ref.uri
    )
    return ref
