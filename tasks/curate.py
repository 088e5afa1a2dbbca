"""Prefect task: curate raw trajectories (filters, dedup, decontamination, data-quality gate)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from coa import io
from coa.curate.config import CurateConfig
from coa.curate.runner import report_uri, run_curate_stage


@task(name="curate")
def curate_task(
    cfg: CurateConfig, raw: io.ArtifactRef, tasks: io.ArtifactRef, tasks_table: str
) -> io.ArtifactRef:
    """Curate ``raw``; publish the headline numbers and a link to the report. A failed gate fails."""
    logger = get_run_logger()
    ref, result = run_curate_stage(cfg, raw, tasks, tasks_table, io.Store())
    if result is None:
        logger.info("curate: reusing %s", ref.uri)
        return ref
    create_markdown_artifact(
        key="curate-summary", markdown=result.headline, description=f"Curation of {raw.uri}"
    )
    if "://" not in ref.uri:
        create_link_artifact(
            key="curate-report", link=f"file://{report_uri(ref)}", description="Data-quality report"
        )
    logger.info(
        "curate: %d in, %d kept, %d quarantined %s; report %s",
        result.rows_in,
        result.rows_kept,
        result.rows_quarantined,
        result.reasons,
        report_uri(ref),
    )
    return ref
