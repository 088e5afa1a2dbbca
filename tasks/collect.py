"""Prefect task: collect teacher trajectories for a task table (resumable, checkpointed)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from coa import io
from coa.collect import run_collect_stage, summary_markdown
from coa.teacher import CollectConfig


@task(name="collect")
def collect_task(cfg: CollectConfig, tasks_ref: io.ArtifactRef, table: str) -> io.ArtifactRef:
    """Run the teacher on every task of ``tasks_ref[table]``; publish the collection summary."""
    logger = get_run_logger()
    last_logged = [-1]

    def progress(done: int, total: int) -> None:
        step = max(1, total // 10)
        if done == total or done // step != last_logged[0]:
            last_logged[0] = done // step
            logger.info("collect: %d/%d runs finished", done, total)

    ref, summary = run_collect_stage(cfg, tasks_ref, table, io.Store(), progress)
    create_markdown_artifact(key="collect-summary", markdown=summary_markdown(summary, ref.uri))
    logger.info(
        "collect: %d runs, %.0f%% completed, %d prompt + %d completion tokens -> %s",
        summary["runs"],
        100 * summary["completion_rate"],
        summary["prompt_tokens"],
        summary["completion_tokens"],
        ref.uri,
    )
    return ref
