"""Run a step on another work pool: its spec goes to ``flows/step.py:run_one_step`` by ``run_deployment``.

:func:`step_runner` is the step runner the flows hand the plan runner: a step ``dispatch`` sends to
the GPU pool goes through :func:`run_on_pool`, the others through the one Prefect task for steps.

Called from a flow (the child flow run is linked as its subflow). The parent sends the step's
:class:`~coa.plan.spec.StepSpec` (config, resolved inputs, code version, expected key and URI); the
child rebuilds exactly that step, refuses it if it would compute another key, and commits the
artifact at the address the spec names, which the parent opens once the child completes: no result
storage is needed, only a store both sides reach.

**The parent's own watch.** The child is launched (``run_deployment(..., timeout=0)``) and polled;
it beats a lease in the store every ``dispatch.heartbeat_s`` seconds while it runs
(:mod:`coa.heartbeat`, which says why the store carries the beats). A child that is Running and has
not beaten for ``dispatch.heartbeat_timeout_s`` (its worker or machine died: nobody else reports its
state) is marked Crashed here through the Prefect API, with a message naming the silence and the
last beat, and sent again like any crashed child. A child still Scheduled or Pending (queued behind
the deployment's concurrency limit, or waiting for a worker) is never declared dead. The heartbeat
automation of ``infra/prefect/`` stays for runs whose parent died too.

A step already committed at its address is not dispatched: it is reused through the one step task,
so the run's graph has a node for it all the same. The child run's graph edges are the step's own
upstream results (passed as ``upstream``), never every step before it. A child that fails with a
reason (a failed check, bad input, a refused spec) fails the step with that reason, as an inline
run would; "infrastructure error" is kept for a child that crashed, was cancelled, or completed
without committing at the expected address. A crashed child (its process killed mid-build) is sent
again (``dispatch.crash_retries`` times), each retry resuming from the step's last complete checkpoint;
after the last one the failure names the step and how to go on: rerun, which resumes from the
checkpoint it names (read from disk).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

from prefect import get_client, get_run_logger
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.objects import FlowRun, RunType, State, StateDetails
from prefect.client.schemas.responses import SetStateStatus
from prefect.deployments import run_deployment
from prefect.runtime import flow_run
from prefect.states import Completed, Crashed
from prefect.utilities.engine import link_state_to_result

from coa import io, tracking
from coa.attempts import rerun_hint, resumes
from coa.errors import CoaError, InfraError, describe
from coa.execution import ShardExecutor
from coa.heartbeat import Watch, drop, read_beat
from coa.plan.config import DispatchConfig
from coa.plan.runner import StepRunner
from coa.plan.spec import spec_of
from coa.resources import BuildResources
from coa.steps import Step, StepResult, resolve
from tasks.run_step import run_step_task


def step_runner(dispatch: DispatchConfig, shards: ShardExecutor | None, scope: str = "") -> StepRunner:
    """The step runner the flows hand the plan runner (:class:`coa.plan.runner.PlanRun`): a step
    ``dispatch`` sends to the GPU pool crosses as a step spec (:func:`run_on_pool`); the others run in
    the one Prefect task for steps, their shards on ``shards``. Either way the step gets only the
    results it reads (so Prefect's run graph shows the plan's real edges); a step only reused
    (``run_it`` False) never leaves the flow; a failure is its one-line reason."""

    def run(step: Step, upstream: Mapping[str, StepResult], run_it: bool) -> StepResult | str:
        if run_it and dispatch.dispatches(step.name):
            try:
                return run_on_pool(step, upstream, dispatch, scope)
            except CoaError as e:
                return describe(e)
        state = run_step_task(step, dict(upstream), run_it, shards, scope, return_state=True)
        if state.is_failed():
            return state.message or "failed"
        result: StepResult = state.result()
        return result

    return run


def committed(uri: str, step: str, store: io.Store) -> StepResult | None:
    """The committed result at ``uri`` (a recorded failed check is returned too: the step task
    re-raises it as the inline path does)."""
    ref = io.lookup(uri, store.settings)
    if ref is None:
        return None
    lineage = io.read_lineage(ref, store.settings)
    summary = lineage.get("result", {}).get("summary", {})
    return StepResult(step, ref, True, summary, BuildResources.from_json(lineage.get("resources")))


def run_on_pool(
    step: Step, upstream: Mapping[str, StepResult], dispatch: DispatchConfig, scope: str = ""
) -> StepResult | str:
    """Run ``step`` through ``dispatch.deployment``: its committed result, or the one line saying why not.

    ``upstream``: the results of the steps it reads (:func:`coa.plan.runner.upstream_of`). A child run
    that crashed (its process died, or its heartbeats stopped: see the module doc) is sent again up to
    ``dispatch.crash_retries`` times: each retry resumes from the step's last complete checkpoint,
    which the warning names, read from disk."""
    logger = get_run_logger()
    store = io.Store()
    spec = spec_of(step, resolve(step, upstream), store)
    if io.lookup(spec.uri, store.settings) is not None:  # reuse here: a node in this run, no dispatch
        logger.info("%s: committed at %s, reused (not dispatched)", step.name, spec.uri)
        reused = run_step_task(step, dict(upstream), False, scope=scope, return_state=True)
        return reused.message or "failed" if reused.is_failed() else reused.result()
    parameters = {
        "spec": json.loads(spec.model_dump_json()),  # fresh objects: no false edge in the run graph
        "scope": scope,
        "upstream": [result.ref for result in upstream.values()],  # the graph's edges: the real ones
        "tracking": tracking.for_dispatch(),  # the parent's tracker: the child's run reports there too
        "heartbeat_s": dispatch.heartbeat_s,
    }
    name = f"{flow_run.name or 'run'}/{step.name}"
    deployment, crash_retries, timeout_s = dispatch.deployment, dispatch.crash_retries, dispatch.timeout_s
    with get_client(sync_client=True) as client:
        for attempt in range(crash_retries + 1):
            run_name = name if attempt == 0 else f"{name}/retry-{attempt}"
            logger.info(
                "%s: dispatched to deployment %s as %s (key %s)", step.name, deployment, run_name, spec.key
            )
            child: FlowRun = run_deployment(  # type: ignore[assignment]
                deployment, parameters=parameters, timeout=0, flow_run_name=run_name
            )
            state = watch_run(client, child, store, dispatch)
            if state is None or not state.is_crashed() or attempt == crash_retries:
                break
            # the process building the step died (a worker killed, OOM, a lost machine): run it again,
            # from the step's last complete checkpoint, a bounded number of times
            why = " ".join((state.message or "no message").split()).rstrip(".")
            then = resumes(store, spec.uri).removeprefix("; ") or "builds it again"
            logger.warning(
                "%s: flow run %s crashed (%s); retry %d of %d: it %s",
                step.name,
                child.name,
                why,
                attempt + 1,
                crash_retries,
                then,
            )
    if state is None or not state.is_final():
        return describe(
            InfraError(f"flow run {child.name} of {deployment} did not finish within {timeout_s} s")
        )
    if state.is_failed() and state.message:  # the step's own reason, with its kind
        return state.message
    if not state.is_completed():
        why = " ".join((state.message or "no message").split()).rstrip(".")
        if state.is_crashed():  # the process building the step died (SIGKILL, OOM, a lost machine)
            tries = f" (after {crash_retries} retries)" if crash_retries else ""
            return describe(
                InfraError(
                    f"flow run {child.name} of {deployment} crashed while building {step.name} ({why})"
                    f"{tries}: nothing was committed; {rerun_hint(store, spec.uri)}"
                )
            )
        return describe(InfraError(f"flow run {child.name} of {deployment} ended {state.name}: {why}"))
    result = committed(spec.uri, step.name, store)
    if result is None:
        return describe(
            InfraError(
                f"{deployment} completed {step.name} but nothing is committed at {spec.uri}: "
                "the worker and this flow do not share the store (COA_STORAGE_ROOT)"
            )
        )
    logger.info("%s: %s committed %s", step.name, child.name, result.ref.uri)
    built = dataclasses.replace(result, reused=False)  # built by the pool's worker: its resources
    if child.parent_task_run_id is not None:  # later steps draw their edge from the dispatch node
        node: State[Any] = Completed(state_details=StateDetails(task_run_id=child.parent_task_run_id))
        link_state_to_result(node, built, RunType.TASK_RUN)
    return built


def watch_run(
    client: SyncPrefectClient, child: FlowRun, store: io.Store, dispatch: DispatchConfig
) -> State[Any] | None:
    """Poll ``child`` until it is final: its final state, the Crashed state set here when it is
    Running and its heartbeats stopped (:class:`coa.heartbeat.Watch`), or its last state (None if it
    has none) when ``dispatch.timeout_s`` passed first."""
    watch = Watch(dispatch.heartbeat_timeout_s)
    poll_s = min(dispatch.heartbeat_s / 2, 2.0)  # a state read (and a lease read) per poll: cheap
    started = time.monotonic()
    while True:
        state = client.read_flow_run(child.id).state
        if state is not None and state.is_final():
            return state
        running = state is not None and state.is_running()
        silence = watch.see(running, read_beat(store, str(child.id)))
        if silence is not None:
            why = watch.describe(silence)
            crashed: State[Any] = Crashed(message=f"{why}; Crashed by the flow run that dispatched it")
            answer = client.set_flow_run_state(child.id, crashed)  # refused if it ended meanwhile
            if answer.status == SetStateStatus.ACCEPT:
                drop(store, str(child.id))
                return answer.state or crashed
        if dispatch.timeout_s is not None and time.monotonic() - started > dispatch.timeout_s:
            return state
        time.sleep(poll_s)
