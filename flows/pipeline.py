"""The pipeline flow: the plan of a profile, run step by step.

``plan(config)`` (:mod:`coa.plan.pipeline`) lists the steps: task sets → collect → curate → convert →
student → SFT → evaluate before/after beside the teacher → report. The one plan runner
(:class:`coa.plan.runner.PlanRun`) runs them through the Prefect step runner
(:func:`tasks.dispatch.step_runner`: the one Prefect task for steps, or with ``dispatch.mode:
deployment`` the GPU pool's ``run-one-step`` flow for the GPU steps), each reused when its artifact
is committed; ``only`` runs a slice (the steps in front of it are reused, never built). With
``execution.engine: ray`` the shards of collection, curation and conversion run as Prefect tasks on
a Ray cluster (:mod:`tasks.fanout`). The run's end (:mod:`tasks.summary`): its summary, stage table
and lineage as Prefect artifacts (``pipeline-demo-summary``), or a failed step's one-line reason as
the Failed state's message. Runs are named by profile and start time (``pipeline-demo-20261125-140501``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import PurePath
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import State

from coa import tracking
from coa.plan import load_pipeline_config, plan
from coa.plan.run_result import RunResult
from coa.plan.runner import PlanRun
from tasks.dispatch import step_runner
from tasks.fanout import executor
from tasks.outcome import project_errors_fail
from tasks.publish import scope_of
from tasks.summary import publish_run


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
    cfg = load_pipeline_config(config_path, overrides or [])  # a bad profile: one line (project_errors_fail)
    steps, scope = plan(cfg), scope_of("pipeline", config_path)
    get_run_logger().info("pipeline %r: %s", cfg.run_name, " → ".join(s.name for s in steps))
    with executor(cfg.execution) as shards, tracking.activate(cfg.tracking):  # shards on Ray; the tracker
        run = PlanRun(steps).run(step_runner(cfg.dispatch, shards, scope), only)
    return publish_run(scope, cfg, steps, run)
