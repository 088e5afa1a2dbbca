"""What a flow run publishes when its plan has run (:class:`coa.plan.runner.PlanRun`), and how it ends.

A run that finished publishes its stage table (rows per stage), a markdown summary and the lineage
graph of its last artifact as Prefect artifacts (keys scoped by flow and profile:
``pipeline-demo-summary``, :func:`tasks.publish.scope_of`). A run that stopped on a failed step ends
Failed with the step's one-line reason as the state message, after publishing its summary; the reason
is also logged and sent as a ``coa.step.failed`` event about the flow run (``prefect deployment run
--watch`` prints a run's events, its logs only when the server streams them). A night
(:func:`coa.plan.nightly.run_night`) adds its gate's verdict and the nightly history.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.events import emit_event
from prefect.runtime import flow_run
from prefect.states import Failed, State

from coa.lineage import to_markdown, trace
from coa.plan.config import PipelineConfig
from coa.plan.nightly import NightResult
from coa.plan.run_result import RunResult, run_result
from coa.plan.runner import Plan, PlanRun
from coa.registry.gate import verdict_markdown
from tasks.publish import artifact_key, publish_history


def publish_run(scope: str, cfg: PipelineConfig, plan: Plan, run: PlanRun) -> RunResult | State[Any]:
    """The end of a pipeline run: Failed with its reason (:func:`fail`), else its lineage and summary
    published and its typed result returned."""
    if run.failure is not None:
        return fail(scope, cfg, plan, run)
    publish_lineage(scope, run)
    return publish_summary(scope, cfg, plan, run)


def publish_night(scope: str, cfg: PipelineConfig, night: NightResult) -> dict[str, Any] | State[Any]:
    """The end of a night: Failed with its reason; or stopped (no new tasks) with its history row; or
    the gate's outcome (logged with its reasons, published as ``<scope>-gate``), the history, the
    lineage and the summary. Returns the night's summary as JSON, with the stage table."""
    logger, run, plan = get_run_logger(), night.run, night.plan
    if run.failure is not None:
        return fail(scope, cfg, plan, run)
    name = plan.gate.artifact  # the registry name the candidate competes for
    publish_history(scope, name, night.history)
    promotion = night.promotion
    if promotion is None:
        logger.info("%s tonight: nothing to collect or train; the champion stays", run.stopped)
        publish_summary(scope, cfg, plan, run)
        return {"night": night.night, "outcome": run.stopped, "seconds": run.seconds}
    verdict, outcome = promotion.verdict, promotion.outcome
    for reason in verdict.reasons:
        (logger.info if verdict.promote else logger.warning)("gate: %s", reason)
    logger.info("gate %s; champion of %s: %s", outcome, name, promotion.champion or "-")
    create_markdown_artifact(
        key=artifact_key(scope, "gate"),
        markdown=verdict_markdown(name, promotion.candidate, verdict, outcome),
        description=f"Promotion gate of night {night.night}: {outcome}",
    )
    publish_lineage(scope, run)
    result = publish_summary(scope, cfg, plan, run).model_dump(mode="json")
    result.update(
        night=night.night, outcome=outcome, verdict=verdict.to_dict(), candidate=promotion.candidate,
        champion=promotion.champion, seconds=run.seconds,
    )  # fmt: skip
    return result


def fail(scope: str, cfg: PipelineConfig, plan: Plan, run: PlanRun) -> State[Any]:
    """End the flow run Failed with the failing step's one-line reason, after publishing the summary
    (the reason also logged and sent as a ``coa.step.failed`` event: see the module docstring)."""
    assert run.failure is not None
    name, reason = run.failure.step.name, run.failure.reason
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
    publish_summary(scope, cfg, plan, run)
    return Failed(message=f"{name}: {reason}")


def publish_lineage(scope: str, run: PlanRun) -> None:
    """The lineage graph of the run's last artifact (the report reads every other) as an artifact."""
    if not run.done:
        return
    last = list(run.done.values())[-1]
    create_markdown_artifact(
        key=artifact_key(scope, "lineage"),
        markdown=to_markdown(trace(last.ref.uri)),
        description=f"Lineage of {last.step}: every artifact back to the task sources",
    )


def publish_summary(scope: str, cfg: PipelineConfig, plan: Plan, run: PlanRun) -> RunResult:
    """The run's stage table and summary as Prefect artifacts; the run's typed result."""
    result = run_result(cfg, plan, run.done)
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
    if run.failure is not None:
        lines += [f"**Failed at `{run.failure.step.name}`**: {run.failure.reason}", ""]
    lines += ["| stage | status | rows | artifact |", "|---|---|---|---|"]
    lines += [f"| {r['stage']} | {r['status']} | {r['rows']} | {r['artifact'] or '-'} |" for r in rows]
    create_markdown_artifact(
        key=artifact_key(scope, "summary"),
        markdown="\n".join(lines),
        description=f"Pipeline summary: {scope}",
    )
    return result
