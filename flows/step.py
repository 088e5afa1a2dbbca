"""One step of a pipeline plan as its own flow: what the GPU pool's deployment runs.

The pipeline flow dispatches a GPU step (SFT, RL, GPU evaluation) with ``run_deployment``, passing
the profile, its overrides, the step's name and the artifact URIs of the steps before it. This flow
re-plans from the same config, rebuilds those results from the store, and runs the one step through
the same Prefect task as an inline run. The step commits its artifact at its content address, which
the parent computes itself: nothing but URIs crosses between the two (both reach the store: a shared
folder on one machine, S3 in production).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Failed

from coa import io
from coa.pipeline_config import load_pipeline_config, plan
from coa.steps import StepResult
from tasks.steps import run_step_task


@flow(name="run-one-step", flow_run_name="{step_name}", log_prints=True)
def run_one_step(
    config_path: str, overrides: list[str], step_name: str, done: dict[str, str] | None = None
) -> Any:
    """Run ``step_name`` of the plan of ``config_path`` + ``overrides``; ``done``: step → artifact URI."""
    logger = get_run_logger()
    cfg = load_pipeline_config(config_path, overrides)
    steps = {s.name: s for s in plan(cfg)}
    if step_name not in steps:
        return Failed(message=f"input error: no step {step_name!r} in the plan ({', '.join(steps)})")
    results = {}
    for name, uri in (done or {}).items():
        ref = io.open_artifact(uri)
        results[name] = StepResult(name, ref, True, io.read_lineage(ref).get("result", {}).get("summary", {}))
    state = run_step_task(steps[step_name], results, True, return_state=True)
    if state.is_failed():
        return Failed(message=state.message or f"{step_name} failed")
    result: StepResult = state.result()
    logger.info("%s committed %s", step_name, result.ref.uri)
    return result.ref.uri
