"""One step of a plan as its own flow: what the GPU pool's deployment runs.

A flow (pipeline, nightly, any other) dispatches a step with ``run_deployment``, passing its
:class:`~coa.plan.spec.StepSpec`. This flow never plans: it rebuilds exactly that step from the spec
(:func:`coa.plan.spec.accept`: the same stage function, the config validated back, the inputs the
spec names), refuses a spec whose key it computes differently with the part that differs, and runs
the step through the same Prefect task as an inline run. The step commits its artifact at the
address the spec names; nothing but the spec and URIs crosses between the two (both reach the store:
a shared folder on one machine, S3 in production).

With ``heartbeat_s`` (the dispatching flow passes ``dispatch.heartbeat_s``) the run beats a lease in
the store, keyed by its flow-run id, from its first line to its last (:mod:`coa.heartbeat`): the
dispatching flow declares it dead when the beats stop (its worker or machine died) and sends it again.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Failed
from pydantic import ValidationError

from coa import io
from coa import tracking as coa_tracking
from coa.errors import CoaError, describe
from coa.heartbeat import Heartbeat
from coa.plan.spec import SPEC_VERSION, StepSpec, accept
from coa.steps import StepResult
from coa.tracking.config import TrackingConfig
from tasks.outcome import project_errors_fail
from tasks.run_step import run_step_task


@flow(name="run-one-step", log_prints=True)
@project_errors_fail
def run_one_step(
    spec: dict[str, Any],
    scope: str = "",
    upstream: list[dict[str, Any]] | None = None,
    tracking: dict[str, Any] | None = None,
    heartbeat_s: float | None = None,
) -> Any:
    """Rebuild and run the step of ``spec``; ``scope`` prefixes its Prefect artifact keys;
    ``upstream``: the artifacts it reads (the same as the spec's inputs; they give the parent's run
    graph its edges); ``tracking``: the parent's tracking config (not part of the step's key);
    ``heartbeat_s``: beat the run's lease this often while it runs (None: no beats)."""
    beats: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if heartbeat_s:  # from its first line: a worker killed at any point leaves a silent lease
        beats = Heartbeat(io.Store(), str(flow_run.id), heartbeat_s)
    with beats:
        return _run_one_step(spec, scope, tracking)


def _run_one_step(spec: dict[str, Any], scope: str, tracking: dict[str, Any] | None) -> Any:
    logger = get_run_logger()
    coa_tracking.use(TrackingConfig.model_validate(tracking) if tracking else None)
    try:
        parsed = StepSpec.model_validate(spec)
        step, inputs = accept(parsed)
    except ValidationError as e:
        reason = f"input error: not a step spec of version {SPEC_VERSION}: {e.errors()[0]['msg']}"
        logger.error("%s: %s", spec.get("name", "step"), reason)
        return Failed(message=reason)
    except CoaError as e:
        logger.error("%s: %s", spec.get("name", "step"), describe(e))
        return Failed(message=describe(e))
    logger.info("%s: spec accepted (key %s, %d inputs)", step.name, parsed.key, len(inputs))
    state = run_step_task(step.with_inputs(inputs), {}, True, scope=scope, return_state=True)
    if state.is_failed():
        return Failed(message=state.message or f"{step.name} failed")
    result: StepResult = state.result()
    logger.info("%s committed %s", step.name, result.ref.uri)
    return result.ref.uri
