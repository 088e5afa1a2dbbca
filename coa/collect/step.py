"""The collection steps: the teacher on every task of a table → a committed ``trajectory.v1`` artifact.

* :func:`step`: every planned run (tasks × samples). Finished runs are checkpointed under
  ``{root}/checkpoints/trajectories/<name>-<key>`` while it runs; a rerun after a crash, a kill or a
  spent budget resumes from them (the summary says how many runs it reused), and the folder is
  removed once the artifact is committed. Given an executor (``execution.engine: ray``), the plan
  runs as shards (:mod:`coa.collect.shards`) into the same checkpoints; the table is assembled the
  same way either way.
* :func:`retry_step` (``coa collect --retry-failed``, ``collect.retry_failed``): a new artifact that
  keeps the finished runs of an earlier collection and re-runs only those that ended in an error,
  in the same order, with the same run ids; its lineage names the artifact it repaired. Its calls
  bypass the LLM cache (a cached reply that led to the failure is never replayed as the answer to a
  retry) and its summary says how many requests it sent.

Before the first run the teacher endpoint is checked (``collect.preflight``): unreachable or not
serving chat completions is exit 3 within seconds. While it runs,
``collect.max_consecutive_failures`` runs in a row that end in an infrastructure error stop it (a
circuit breaker, exit 3, the finished runs kept). A run whose model answered off the agents'
protocol is that run's failure (status ``error``, error ``AgentParsingError: …``): it is committed
with the others and never counts as infrastructure. A collection in which every run, or more than
``collect.max_failed_share`` of them, ended in an infrastructure error (status ``error``: an
endpoint down, retries exhausted) is not committed: the step raises
:class:`~coa.collect.runs.CollectionFailed` (exit 3), the failed runs are dropped from the
checkpoints so the rerun runs them again, and the finished ones are kept. The failed share is in the
summary either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import posixpath
from typing import Any

import pyarrow.parquet as pq

import schemas
from coa.collect.config import CollectConfig
from coa.collect.runs import (
    FAILED_STATUS,
    CheckpointFolder,
    CircuitBreaker,
    CollectionFailed,
    CollectionIncomplete,
    CollectOutcome,
    PlannedRun,
    check_failed_share,
    collect_runs,
    limit_tasks,
    plan_runs,
    summarize,
)
from coa.collect.shards import collect_sharded
from coa.collect.summary import CollectSummary, Outcome, Repair
from coa.collect.teacher import open_teacher
from coa.errors import UserError
from coa.steps import Build, Stage, Step, StepInput
from coa.tools.collection import INPUT as ENCYCLOPEDIA
from coa.tools.collection import read_collection

TABLE = "trajectories"
log = logging.getLogger(__name__)


def step(
    config: CollectConfig, tasks: StepInput, name: str = "collect", encyclopedia: StepInput | None = None
) -> Step:
    """Collect ``config.samples_per_task`` teacher runs per task of ``tasks``; the local search serves
    ``encyclopedia`` (the synthetic step's ``document.v1`` table; None: no local search)."""
    once = config.model_copy(update={"retry_failed": False})  # the switch does not change this step
    return STAGE.step(once, {"tasks": tasks, ENCYCLOPEDIA: encyclopedia}, name=name, artifact=config.name)


def _build(b: Build) -> None:
    config: CollectConfig = b.step.config
    tasks, warnings = limit_tasks(b.table("tasks").read(), config.limit, config.limit_per_family)
    for warning in warnings:
        log.warning("collect: %s", warning)
    planned = plan_runs(tasks, config.samples_per_task)
    checkpoints = CheckpointFolder(b.store.checkpoint_uri(b.writer.uri))
    breaker = CircuitBreaker(config.max_consecutive_failures)
    collection = read_collection(b.optional(ENCYCLOPEDIA))

    async def run() -> CollectOutcome:
        async with open_teacher(config, b.store.root, collection) as teacher:
            return await collect_runs(
                teacher, planned, checkpoints, config.concurrency, b.progress, breaker=breaker
            )

    if b.executor is None:
        outcome = asyncio.run(run())
    else:  # ranges of the plan as shards on the executor (execution.engine: ray), same checkpoints
        executor, root = b.executor, b.store.root
        outcome = collect_sharded(
            executor, config, planned, checkpoints, root, b.progress, breaker, collection
        )
    stop_if_tripped(breaker, checkpoints, "fix the endpoint (collect.llm) and rerun the same command")
    if outcome.budget_stopped:
        raise CollectionIncomplete(
            f"the LLM budget ran out after {outcome.resumed + outcome.ran} of {outcome.planned} runs; "
            "they are checkpointed: raise collect.llm.budget_tokens / budget_usd and rerun to finish"
        )
    run_ids = [p.run_id for p in planned]
    failed = check_failed_share(
        checkpoints,
        run_ids,
        config.max_failed_share,
        "fix the endpoint (collect.llm) and rerun the same command",
    )
    with b.writer.table_writer(TABLE, schemas.TRAJECTORY) as write:
        for part in checkpoints.read(run_ids):  # one row group per 256 runs
            write(part)
    b.writer.extra_lineage["collect"] = {**dataclasses.asdict(outcome), **failed}
    b.report(CollectSummary(**summarize_rows(b), collect=_outcome(outcome), warnings=tuple(warnings)))
    b.cleanup.append(checkpoints.remove)


def stop_if_tripped(breaker: CircuitBreaker, checkpoints: CheckpointFolder, hint: str) -> None:
    """Raise :class:`CollectionFailed` (exit 3) when the circuit breaker stopped the collection; the
    runs that failed on infrastructure are dropped from the checkpoints (the rerun runs them again)."""
    if not breaker.tripped:
        return
    checkpoints.forget_infra_failures()
    example = " ".join(str(breaker.last_error).split())[:160]
    raise CollectionFailed(
        f"the collection stopped after {breaker.streak} runs in a row ended in an infrastructure error "
        f"(collect.max_consecutive_failures={breaker.limit}), e.g. {example!r}; nothing was committed, the "
        f"finished runs are kept: {hint}"
    )


def requests_sent(teacher: object) -> int:
    """HTTP requests the teacher's LLM clients sent (0 for the offline teacher)."""
    router = getattr(getattr(teacher, "backend", None), "router", None)
    clients = getattr(router, "clients", {}) or {}
    return sum(int(c.stats.requests) for c in clients.values())


def _outcome(outcome: CollectOutcome) -> Outcome:
    return Outcome(**dataclasses.asdict(outcome))


def summarize_rows(b: Build) -> dict[str, Any]:
    """The headline numbers of what was just staged (read back from the checkpoints' rows)."""
    fs, path = b.writer.fs, posixpath.join(b.writer.staging, f"{TABLE}.parquet")
    with fs.open(path, "rb") as fh:
        return summarize(schemas.TRAJECTORY.conform(pq.read_table(fh)))


def retry_step(
    config: CollectConfig,
    previous: StepInput,
    tasks: StepInput,
    name: str = "collect.retry",
    encyclopedia: StepInput | None = None,
) -> Step:
    """Re-run the runs of ``previous`` that ended in an error; keep every other run as it is (the
    local search serving ``encyclopedia``, as :func:`step`'s)."""
    retry = config.model_copy(update={"retry_failed": True})
    inputs = {"previous": previous, "tasks": tasks, ENCYCLOPEDIA: encyclopedia}
    return RETRY.step(retry, inputs, name=name, artifact=config.name)


def _build_retry(b: Build) -> None:
    config: CollectConfig = b.step.config
    previous = b.table("previous")
    old = previous.read()
    statuses = old.column("status").to_pylist()
    failed = [i for i, status in enumerate(statuses) if status == FAILED_STATUS]
    tasks = {t["task_id"]: t for t in b.table("tasks").read().to_pylist()}
    rows = old.select(["run_id", "task_id", "sample_index"]).to_pylist()
    missing = sorted({rows[i]["task_id"] for i in failed if rows[i]["task_id"] not in tasks})
    if missing:
        raise UserError(f"failed runs of {previous.uri} solve tasks not in the task table: {missing[:3]}")
    planned = [
        PlannedRun(rows[i]["run_id"], tasks[rows[i]["task_id"]], rows[i]["sample_index"]) for i in failed
    ]
    checkpoints = CheckpointFolder(b.store.checkpoint_uri(b.writer.uri))
    # the failed runs' calls bypass the LLM cache: a cached reply that led to the failure (or an
    # unparseable one) is never replayed as the answer to a retry
    fresh = config.model_copy(update={"llm": config.llm.model_copy(update={"cache": False})})
    sent = [0]

    breaker = CircuitBreaker(config.max_consecutive_failures)
    collection = read_collection(b.optional(ENCYCLOPEDIA))

    async def run() -> CollectOutcome:
        async with open_teacher(fresh, b.store.root, collection) as teacher:
            try:
                return await collect_runs(
                    teacher, planned, checkpoints, config.concurrency, b.progress, breaker=breaker
                )
            finally:
                sent[0] = requests_sent(teacher)

    outcome = asyncio.run(run()) if planned else CollectOutcome(0, 0, 0, False)
    stop_if_tripped(breaker, checkpoints, "fix the endpoint (collect.llm) and rerun with --retry-failed")
    if outcome.budget_stopped:
        raise CollectionIncomplete(
            f"the LLM budget ran out after retrying {outcome.resumed + outcome.ran} of {len(planned)} failed "
            "runs; they are checkpointed: raise collect.llm.budget_tokens / budget_usd and rerun to finish"
        )
    hint = "fix the endpoint (collect.llm) and rerun with --retry-failed"
    ids = [p.run_id for p in planned]  # every other run of the table finished: the share is theirs
    check_failed_share(checkpoints, ids, config.max_failed_share, hint, total=old.num_rows)
    retried = {
        r["run_id"]: r for part in checkpoints.read([p.run_id for p in planned]) for r in part.to_pylist()
    }
    with b.writer.table_writer(TABLE, schemas.TRAJECTORY) as write:
        for start in range(0, old.num_rows, 256):
            chunk = old.slice(start, 256).to_pylist()
            write(schemas.TRAJECTORY.from_rows([retried.get(r["run_id"], r) for r in chunk]))
    still = sum(1 for r in retried.values() if r["status"] == FAILED_STATUS)
    repair = Repair(
        of=previous.uri,
        retried=len(planned),
        still_failed=still,
        resumed=outcome.resumed,
        requests_sent=sent[0],
    )
    b.writer.extra_lineage["repaired"] = repair.model_dump(mode="json")
    b.report(CollectSummary(**summarize_rows(b), repaired=repair, collect=_outcome(outcome)))
    b.cleanup.append(checkpoints.remove)


STAGE = Stage(
    name="collect",
    kind="trajectories",
    build=_build,
    config=CollectConfig,
    expects={"tasks": "task.v1", ENCYCLOPEDIA: "document.v1"},
    produces={TABLE: "trajectory.v1"},
    summary=CollectSummary,
    describe="teacher runs (multi-agent, real tools)",
)
RETRY = Stage(
    name="collect.retry",
    kind="trajectories",
    build=_build_retry,
    config=CollectConfig,
    expects={"previous": "trajectory.v1", "tasks": "task.v1", ENCYCLOPEDIA: "document.v1"},
    produces={TABLE: "trajectory.v1"},
    summary=CollectSummary,
    describe="re-run the failed runs of a collection",
)
