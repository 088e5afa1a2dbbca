"""The pipeline flow: the plan of a profile, run step by step.

``plan(config)`` (:mod:`coa.plan.pipeline`) lists the steps: task sets → collect → curate →
convert → student → SFT → evaluate before/after beside the teacher → report. Each runs in the one
Prefect task for steps (reused when its artifact is committed); ``only`` runs a slice (the steps in
front of it are reused, never built). With ``dispatch.mode: deployment`` the GPU steps run as the
``run-one-step`` flow of the GPU pool's deployment, sent as a step spec (:mod:`tasks.dispatch`); the
rest stay here.
With ``execution.engine: ray`` the shards of collection, curation and conversion run as Prefect
tasks on a Ray cluster (:mod:`tasks.fanout`), one cluster connection for the whole run.
Publishes a summary, the rows per stage and the lineage graph of the run's last artifact as Prefect
artifacts (keys scoped by flow and profile: ``pipeline-demo-summary``); a failed step fails the flow
run with its one-line reason as the state message, also logged (``prefect deployment run --watch``
prints it). Runs are named by profile and start time (``pipeline-demo-20261125-140501``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import PurePath
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.events import emit_event
from prefect.runtime import flow_run
from prefect.states import Failed, State

from coa import tracking
from coa.errors import CoaError, describe
from coa.execution import ShardExecutor
from coa.lineage import to_markdown, trace
from coa.plan import PipelineConfig, load_pipeline_config, plan
from coa.plan.preview import select
from coa.plan.run_result import RunResult, run_result
from coa.steps import Step, StepResult, Upstream, warm_code_versions
from tasks.dispatch import run_on_pool
from tasks.fanout import executor
from tasks.outcome import project_errors_fail
from tasks.publish import artifact_key, scope_of
from tasks.run_step import run_step_task


def run_name() -> str:
    """``pipeline-<profile>-<UTC start time>``: runs of one profile sort by time, profiles apart."""
    profile = PurePath(str(flow_run.parameters.get("config_path") or "configs/demo.yaml")).stem
    return f"pipeline-{profile}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"


@flow(name="pipeline", flow_run_name=run_name, log_prints=True)
@project_errors_fail
def pipeline(
    config_path: str = "configs/demo.yaml", overrides: list[str] | None = None, only: list[str] | None = None
) -> RunResult | State[Any]:
    """Run the plan of the profile ``config_path`` with dotted ``overrides`` (``only``: a slice).

    Returns the run's :class:`~coa.plan.run_result.RunResult`; a failed step, a bad profile or any
    other project error ends the run Failed with its one-line reason."""
    logger = get_run_logger()
    cfg = load_pipeline_config(config_path, overrides or [])  # a bad profile: one line (project_errors_fail)
    steps = plan(cfg)
    warm_code_versions(steps)  # here, not in the task threads (coa.steps.warm_code_versions)
    scope = scope_of("pipeline", config_path)
    logger.info("pipeline %r: %s", cfg.run_name, " → ".join(s.name for s in steps))
    done: dict[str, StepResult] = {}
    with executor(cfg.execution) as shards, tracking.activate(cfg.tracking):  # shards on Ray; the tracker
        for step, run_it in select(steps, only):
            outcome = run_planned_step(cfg, step, done, shards, run_it, scope)
            if isinstance(outcome, str):
                return fail(scope, cfg, steps, done, step.name, outcome)
            done[step.name] = outcome
    publish_lineage(scope, done)
    return publish_summary(scope, cfg, steps, done)


def run_planned_step(
    cfg: PipelineConfig,
    step: Step,
    done: dict[str, StepResult],
    shards: ShardExecutor | None,
    run_it: bool = True,
    scope: str = "",
) -> StepResult | str:
    """Run one step of a plan, here or on the GPU pool: its result, or the one line saying why it failed.

    A dispatched step (``dispatch.mode: deployment``) crosses as a step spec to the GPU pool's
    ``run-one-step`` flow; the others run in the one Prefect task for steps. Either way the step gets
    only the results it reads (so Prefect's run graph shows the plan's real edges); ``run_it=False``
    only reuses a committed artifact.
    """
    upstream = upstream_of(step, done)
    if run_it and cfg.dispatch.dispatches(step.name):
        try:
            return run_on_pool(step, upstream, cfg.dispatch, scope)
        except CoaError as e:
            return describe(e)
    state = run_step_task(step, upstream, run_it, shards, scope, return_state=True)
    if state.is_failed():
        return state.message or "failed"
    result: StepResult = state.result()
    return result


def fail(
    scope: str, cfg: PipelineConfig, steps: list[Step], done: dict[str, StepResult], name: str, reason: str
) -> Any:
    """End the flow run Failed with the failing step's one-line reason, after publishing the summary.

    The reason is also logged and sent as a ``coa.step.failed`` event about the flow run, whose
    resource name is the reason: ``prefect deployment run --watch`` prints the run's events (its logs
    only when the server streams them), so the reason is the line before "Flow run finished"."""
    get_run_logger().error("%s: %s", name, reason)
    run_id = flow_run.id
    if run_id:
        emit_event(
            event="coa.step.failed",
            resource={
                "prefect.resource.id": f"coa.step.{run_id}.{name}",
                "prefect.resource.name": f"{name}: {reason}",
            },
            related=[
                {"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"}
            ],
        )
    publish_summary(scope, cfg, steps, done, failed=(name, reason))
    return Failed(message=f"{name}: {reason}")


def upstream_of(step: Step, done: dict[str, StepResult]) -> dict[str, StepResult]:
    """The results of the steps ``step`` reads (its :class:`~coa.steps.Upstream` inputs)."""
    names = {value.step for value in step.inputs.values() if isinstance(value, Upstream)}
    return {name: result for name, result in done.items() if name in names}


def publish_lineage(scope: str, done: dict[str, StepResult]) -> None:
    """The lineage graph of the run's last artifact (the report reads every other) as an artifact."""
    if not done:
        return
    last = list(done.values())[-1]
    create_markdown_artifact(
        key=artifact_key(scope, "lineage"),
        markdown=to_markdown(trace(last.ref.uri)),
        description=f"Lineage of {last.step}: every artifact back to the task sources",
    )


def publish_summary(
    scope: str,
    cfg: PipelineConfig,
    steps: list[Step],
    done: dict[str, StepResult],
    failed: tuple[str, str] | None = None,
) -> RunResult:
    """The run's stage table and summary as Prefect artifacts; the run's typed result."""
    result = run_result(cfg, steps, done)
    rows = [
        {
            "stage": r.stage,
            "status": r.status,
            "rows": "" if r.rows is None else r.rows,
            "artifact": r.artifact or "",
        }
        for r in result.stages
    ]
    create_table_artifact(
        key=artifact_key(scope, "row-counts"), table=rows, description="Rows per stage of this run"
    )
    lines = [f"# Pipeline run `{cfg.run_name}`", ""]
    if failed:
        lines += [f"**Failed at `{failed[0]}`**: {failed[1]}", ""]
    lines += ["| stage | status | rows | artifact |", "|---|---|---|---|"]
    lines += [f"| {r['stage']} | {r['status']} | {r['rows']} | {r['artifact'] or '-'} |" for r in rows]
    create_markdown_artifact(
        key=artifact_key(scope, "summary"),
        markdown="\n".join(lines),
        description=f"Pipeline summary: {scope}",
    )
    return result
