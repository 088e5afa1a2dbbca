"""Run a step on another work pool: ``run_deployment`` of ``flows/step.py:run_one_step``.

Called from the pipeline flow (the child flow run is linked as its subflow). The parent passes the
config and the upstream artifact URIs; the child commits the step's artifact at its content address,
which the parent computes from the same step and inputs (:func:`coa.steps.address`) and opens once
the child completes: no result storage is needed, only a store both sides reach.
"""

from __future__ import annotations

from collections.abc import Mapping

from prefect import get_run_logger
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment

from coa import io
from coa.errors import InfraError
from coa.steps import Step, StepCheckFailed, StepResult, address, resolve


def committed(step: Step, done: Mapping[str, StepResult], store: io.Store) -> StepResult | None:
    """The step's committed result at its content address, if there is one (a failed check raises)."""
    uri, _ = address(step, resolve(step, done), store)
    ref = io.lookup(uri, store.settings)
    if ref is None:
        return None
    record = io.read_lineage(ref, store.settings).get("result", {})
    if record.get("failure"):
        raise StepCheckFailed(step.name, ref.uri, record["failure"])
    return StepResult(step.name, ref, True, record.get("summary", {}))


def run_on_pool(
    step: Step,
    done: Mapping[str, StepResult],
    deployment: str,
    config_path: str,
    overrides: list[str],
    timeout_s: float | None = None,
) -> StepResult:
    """Run ``step`` through ``deployment`` and return its committed artifact (reused if already there)."""
    logger = get_run_logger()
    store = io.Store()
    existing = committed(step, done, store)
    if existing is not None:
        logger.info("%s: reused %s (not dispatched)", step.name, existing.ref.uri)
        return existing
    parameters = {
        "config_path": config_path,
        "overrides": overrides,
        "step_name": step.name,
        "done": {name: result.ref.uri for name, result in done.items()},
    }
    logger.info("%s: dispatched to deployment %s", step.name, deployment)
    child: FlowRun = run_deployment(deployment, parameters=parameters, timeout=timeout_s)  # type: ignore[assignment]
    state = child.state
    if state is None or not state.is_completed():
        message = state.message if state is not None and state.message else "did not complete"
        name = state.name if state is not None else "unknown"
        raise InfraError(f"flow run {child.name} of {deployment} ended {name}: {message}")
    result = committed(step, done, store)
    if result is None:
        raise InfraError(
            f"{deployment} completed {step.name} but no artifact is committed at its address: the worker "
            "and this flow do not share the store (COA_STORAGE_ROOT) or the code version"
        )
    logger.info("%s: %s committed %s", step.name, child.name, result.ref.uri)
    return StepResult(step.name, result.ref, False, result.summary)
