"""Prefect tasks: evaluate a model on held-out tasks, and the training report (before/after, teacher cost)."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from coa import io
from coa.evaluate import EvalConfig, format_metrics_table, run_evaluate_stage
from coa.report import build_training_report, format_comparison
from coa.teacher import ToolsConfig
from coa.train.stage import StudentModel


@task(name="evaluate", log_prints=False)
def evaluate_task(
    cfg: EvalConfig, tasks: io.ArtifactRef, table: str, model: StudentModel, tools: ToolsConfig, label: str
) -> tuple[io.ArtifactRef, dict[str, Any]]:
    """Run ``model`` on ``tasks[table]`` with real tools; publish its metrics table."""
    logger = get_run_logger()
    last = [-1]

    def progress(done: int, total: int) -> None:
        if done == total or done * 10 // total != last[0]:
            last[0] = done * 10 // total
            logger.info("evaluate (%s): %d/%d tasks finished", label, done, total)

    ref, metrics = run_evaluate_stage(cfg, tasks, table, model.path, model.ref, tools, io.Store(), progress)
    key = "evaluate-" + "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")
    create_table_artifact(
        key=key,
        table=[{"family": family, **values} for family, values in metrics.items()],
        description=f"Evaluation {label}: {model.ref.uri if model.ref else model.path}",
    )
    logger.info("evaluate (%s) -> %s\n%s", label, ref.uri, format_metrics_table(metrics))
    return ref, metrics


@task(name="training-report")
def report_task(
    run_name: str,
    tasks: io.ArtifactRef,
    table: str,
    before: tuple[io.ArtifactRef, dict[str, Any]],
    after: tuple[io.ArtifactRef, dict[str, Any]] | None,
    sft: io.ArtifactRef | None,
    teacher_runs: io.ArtifactRef | None,
) -> tuple[io.ArtifactRef, list[dict[str, Any]]]:
    """Write the HTML training report; publish the comparison and a link to the page."""
    ref, rows = build_training_report(
        run_name=run_name, store=io.Store(), tasks=tasks, table=table, before=before, after=after, sft=sft,
        teacher_runs=teacher_runs,
    )  # fmt: skip
    text = format_comparison(rows)
    create_markdown_artifact(
        key="training-comparison",
        markdown=f"```\n{text}\n```",
        description="Student before/after SFT vs teacher",
    )
    if "://" not in ref.uri:
        create_link_artifact(
            key="training-report", link=f"file://{ref.uri}/report.html", description="Training report"
        )
    get_run_logger().info("training report %s/report.html\n%s", ref.uri, text)
    return ref, rows
