"""Collection in shards: contiguous ranges of the planned runs, each run wherever an executor sends it.

Every shard writes its finished runs into the collection's one checkpoint folder (files named by
the run ids they hold, written atomically), so a shard is resumable on its own: a shard whose runs
are all checkpointed is not submitted again, and a shard re-run after its worker died (Ray re-runs
it) skips the runs its killed attempt had already flushed. The step then assembles the committed
table from the checkpoints in plan order, exactly as the one-process build does, so the table does
not depend on how many shards there were or where they ran; a run id appears once whatever was
re-run.

The LLM budget (``collect.llm.budget_tokens`` / ``budget_usd``) is split across the shards in
proportion to their runs, so the shards together never spend more than the run's budget.

Each shard has its own circuit breaker (``collect.max_consecutive_failures`` runs in a row failed on
infrastructure stop the shard from starting more); the driver trips the collection's breaker when
any shard's tripped, so a dead endpoint costs at most that many failed runs per shard, not every
run's retries, and the step fails as the one-process build does (exit 3, finished runs kept).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from coa.collect.config import CollectConfig
from coa.collect.runs import CheckpointFolder, CircuitBreaker, CollectOutcome, PlannedRun, collect_runs
from coa.collect.teacher import open_teacher
from coa.execution import ShardExecutor, shard_ranges
from coa.tools.collection import Collection

SHARD_TASK = "collect-shard"


@dataclasses.dataclass(frozen=True)
class CollectShard:
    """One range of a collection's planned runs and everything a worker needs to run it."""

    index: int
    config: CollectConfig
    storage_root: str
    checkpoints: str
    runs: tuple[PlannedRun, ...]
    flush_seconds: float = 5.0
    collection: Collection | None = None
    """The documents the local search serves (the step's encyclopedia), sent with the shard."""


@dataclasses.dataclass(frozen=True)
class ShardOutcome:
    """What a shard did, and whether its circuit breaker stopped it (with the streak and an error)."""

    outcome: CollectOutcome
    tripped: bool = False
    streak: int = 0
    last_error: str | None = None


def run_shard(shard: CollectShard) -> ShardOutcome:
    """Run the shard's runs that have no checkpoint yet (in a worker, or in this process), until
    they are done or its circuit breaker trips."""
    folder = CheckpointFolder(shard.checkpoints, batch_seconds=shard.flush_seconds)
    breaker = CircuitBreaker(shard.config.max_consecutive_failures)

    async def run() -> CollectOutcome:
        async with open_teacher(shard.config, shard.storage_root, shard.collection) as teacher:
            return await collect_runs(teacher, shard.runs, folder, shard.config.concurrency, breaker=breaker)

    outcome = asyncio.run(run())
    return ShardOutcome(outcome, breaker.tripped, breaker.streak, breaker.last_error)


def shard_config(config: CollectConfig, runs: int, planned: int) -> CollectConfig:
    """``config`` with the LLM budget cut to this shard's share of the planned runs."""
    llm = config.llm
    update: dict[str, object] = {}
    if llm.budget_tokens is not None:
        update["budget_tokens"] = llm.budget_tokens * runs // planned
    if llm.budget_usd is not None:
        update["budget_usd"] = llm.budget_usd * runs / planned
    return config.model_copy(update={"llm": llm.model_copy(update=update)}) if update else config


def collect_sharded(
    executor: ShardExecutor,
    config: CollectConfig,
    planned: Sequence[PlannedRun],
    checkpoints: CheckpointFolder,
    storage_root: str,
    progress: Callable[[int, int], None] | None = None,
    breaker: CircuitBreaker | None = None,
    collection: Collection | None = None,
) -> CollectOutcome:
    """Run ``planned`` as ``executor.shards`` shards; the outcome of the whole collection. ``breaker``
    is tripped (as the first tripped shard's was) when any shard's circuit breaker stopped it;
    ``collection`` is what each shard's local search serves."""
    done = checkpoints.done()
    resumed = 0
    shards: list[CollectShard] = []
    for index, (start, stop) in enumerate(shard_ranges(len(planned), executor.shards)):
        runs = tuple(planned[start:stop])
        finished = sum(1 for p in runs if p.run_id in done)
        if finished == len(runs):  # a shard whose runs are all checkpointed is not run again
            resumed += finished
            continue
        cfg = shard_config(config, len(runs), len(planned))
        shards.append(
            CollectShard(index, cfg, storage_root, checkpoints.uri, runs, executor.flush_seconds, collection)
        )
    if progress:
        progress(resumed, len(planned))
    results = executor.map(run_shard, shards, SHARD_TASK) if shards else []
    tripped = next((r for r in results if r.tripped), None)
    if breaker is not None and tripped is not None:
        breaker.tripped, breaker.streak, breaker.last_error = True, tripped.streak, tripped.last_error
    outcomes = [r.outcome for r in results]
    ran = sum(o.ran for o in outcomes)
    resumed += sum(o.resumed for o in outcomes)
    if progress:
        progress(resumed + ran, len(planned))
    return CollectOutcome(len(planned), resumed, ran, any(o.budget_stopped for o in outcomes))
