"""Collection runs: fan tasks out to the teacher with bounded concurrency, checkpoint finished runs.

Finished runs are written in small batches as ``trajectory.v1`` Parquet files in a checkpoint
folder (temporary name, then renamed): a batch is flushed once it holds ``batch_rows`` runs or
``batch_seconds`` have passed since the last flush, and whatever is pending is flushed when the
collection stops, also on an error or an interrupt. So a kill loses at most the runs in flight and
those of the last few seconds, and one Parquet write serves many runs (one write per run cost ~40%
of the offline teacher's collection time). A rerun with the same inputs reads the run ids already
in the folder, runs only the rest; when every planned run is done the rows are assembled, in plan
order, into the committed artifact. A run the budget stopped is not checkpointed: it is redone on
the next resume.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from coa.agents.backend import BudgetStop, infra_failure
from coa.errors import CheckFailed, InfraError
from coa.io import filesystem, write_atomic


class Teacher(Protocol):
    async def solve(
        self, task: dict[str, Any], sample_index: int = 0, run_id: str | None = None
    ) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    run_id: str
    task: dict[str, Any]
    sample_index: int


def limit_tasks(
    tasks: pa.Table, limit: int | None = None, per_family: Mapping[str, int] | None = None
) -> tuple[pa.Table, list[str]]:
    """The tasks to collect on, and warnings for families a limit leaves out.

    ``limit``: N tasks split across families in proportion to their counts (largest remainders; at
    least one per family when N allows), the first ones of each family, in table order.
    ``per_family``: the first N of each named family. Neither: every task.
    """
    families = tasks.column("family").to_pylist()
    counts = collections.Counter(families)
    if limit is None and per_family is None:
        return tasks, []
    if per_family is not None:
        quota = {f: min(n, counts.get(f, 0)) for f, n in per_family.items()}
    else:
        assert limit is not None
        total = len(families)
        if limit >= total:
            return tasks, []
        share = {f: limit * n / total for f, n in counts.items()}
        quota = {f: int(v) for f, v in share.items()}
        if limit >= len(counts):
            for f in counts:
                quota[f] = max(quota[f], 1)
        left = limit - sum(quota.values())
        for f in sorted(counts, key=lambda f: (share[f] - int(share[f]), counts[f]), reverse=True):
            if left <= 0:
                break
            if quota[f] < counts[f]:
                quota[f] += 1
                left -= 1
        while sum(quota.values()) > limit:  # minimums pushed it over: take from the largest
            largest = max(quota, key=lambda f: quota[f])
            quota[largest] -= 1
    taken: collections.Counter[str] = collections.Counter()
    keep = []
    for i, family in enumerate(families):
        if taken[family] < quota.get(family, 0):
            taken[family] += 1
            keep.append(i)
    dropped = sorted(f for f in counts if taken[f] == 0)
    warnings = [
        f"the collection limit leaves out family {f!r} ({counts[f]} tasks): raise collect.limit or set "
        "collect.limit_per_family"
        for f in dropped
    ]
    return tasks.take(pa.array(keep, pa.int64())), warnings


def plan_runs(tasks: pa.Table, samples_per_task: int) -> list[PlannedRun]:
    """One planned run per (task, sample), with stable ids."""
    return [
        PlannedRun(f"{t['task_id']}#{k}", t, k) for t in tasks.to_pylist() for k in range(samples_per_task)
    ]


class CheckpointFolder:
    """Batches of finished runs as Parquet files under ``uri``; written atomically, read to resume.

    :meth:`add` buffers a finished run and hands back the batch that is due (``batch_rows`` runs, or
    the first run after ``batch_seconds``); :meth:`write_batch` writes it; :meth:`drain` returns what
    is still pending when the collection stops.
    """

    def __init__(self, uri: str, batch_rows: int = 64, batch_seconds: float = 5.0) -> None:
        if batch_rows < 1 or batch_seconds < 0:
            raise ValueError(
                f"batch_rows must be >= 1 and batch_seconds >= 0, got {batch_rows}, {batch_seconds}"
            )
        self.uri = uri.rstrip("/")
        self.fs, self.path = filesystem(self.uri)
        self.batch_rows, self.batch_seconds = batch_rows, batch_seconds
        self._pending: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()

    @staticmethod
    def file_name(run_ids: Sequence[str]) -> str:
        return hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:32] + ".parquet"

    def _files(self) -> list[str]:
        """Committed checkpoint files, sorted (temporary ``.tmp-*`` files are ignored)."""
        if not self.fs.exists(self.path):
            return []
        names = (posixpath.basename(p) for p in self.fs.ls(self.path, detail=False))
        return sorted(n for n in names if n.endswith(".parquet") and not n.startswith("."))

    def _run_ids(self, name: str) -> list[str]:
        with self.fs.open(posixpath.join(self.path, name), "rb") as fh:
            ids: list[str] = pq.read_table(fh, columns=["run_id"]).column("run_id").to_pylist()
        return ids

    def index(self) -> dict[str, str]:
        """Run id -> the checkpoint file that holds it."""
        return {run_id: name for name in self._files() for run_id in self._run_ids(name)}

    def done(self) -> set[str]:
        """Run ids already checkpointed."""
        return set(self.index())

    def add(self, row: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Buffer a finished run; returns the batch to write when one is due (else ``None``)."""
        self._pending.append(row)
        now = time.monotonic()
        if len(self._pending) >= self.batch_rows or now - self._last_flush >= self.batch_seconds:
            self._last_flush = now
            return self.drain()
        return None

    def drain(self) -> list[dict[str, Any]]:
        """Take every buffered run (to write it when the collection stops)."""
        rows, self._pending = self._pending, []
        return rows

    def write_batch(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        buffer = pa.BufferOutputStream()
        pq.write_table(schemas.TRAJECTORY.from_rows(list(rows)), buffer)
        name = self.file_name([r["run_id"] for r in rows])
        write_atomic(self.fs, posixpath.join(self.path, name), buffer.getvalue().to_pybytes())

    def write(self, row: dict[str, Any]) -> None:
        """Checkpoint one run at once (no buffering)."""
        self.write_batch([row])

    def read(self, run_ids: Sequence[str], chunk: int = 256) -> Iterator[pa.Table]:
        """The checkpointed rows of ``run_ids``, in that order, ``chunk`` rows per table.

        Batches hold runs in roughly plan order, so each chunk reads few files; a small cache of
        recently read files keeps memory bounded by a few batches, not the whole collection.
        """
        where = self.index()
        missing = [r for r in run_ids if r not in where]
        if missing:
            raise KeyError(f"{len(missing)} run(s) have no checkpoint in {self.uri}, e.g. {missing[0]!r}")
        cache: collections.OrderedDict[str, tuple[pa.Table, dict[str, int]]] = collections.OrderedDict()

        def load(name: str) -> tuple[pa.Table, dict[str, int]]:
            if name in cache:
                cache.move_to_end(name)
                return cache[name]
            with self.fs.open(posixpath.join(self.path, name), "rb") as fh:
                table = schemas.TRAJECTORY.conform(pq.read_table(fh))
            cache[name] = (table, {r: i for i, r in enumerate(table.column("run_id").to_pylist())})
            if len(cache) > 16:
                cache.popitem(last=False)
            return cache[name]

        for start in range(0, len(run_ids), chunk):
            parts = []
            for run_id in run_ids[start : start + chunk]:
                table, rows = load(where[run_id])
                parts.append(table.slice(rows[run_id], 1))
            yield pa.concat_tables(parts).combine_chunks()

    def statuses(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """Run id -> (status, error) of the checkpointed runs among ``run_ids``."""
        wanted, out = set(run_ids), {}
        for name in self._files():
            with self.fs.open(posixpath.join(self.path, name), "rb") as fh:
                part = pq.read_table(fh, columns=["run_id", "status", "error"]).to_pylist()
            out.update({r["run_id"]: (r["status"], r["error"]) for r in part if r["run_id"] in wanted})
        return out

    def forget(self, status: str, only: Callable[[str | None], bool] | None = None) -> int:
        """Drop the checkpointed runs that ended with ``status`` (a rerun runs them again); how many.

        Each file holding one is rewritten without them under its new name before the old one goes,
        so a crash in between leaves a run twice (identical rows), never lost."""
        dropped = 0
        for name in self._files():
            path = posixpath.join(self.path, name)
            with self.fs.open(path, "rb") as fh:
                table = schemas.TRAJECTORY.conform(pq.read_table(fh))
            statuses = table.column("status").to_pylist()
            errors = table.column("error").to_pylist()
            keep = [
                i
                for i, (s, e) in enumerate(zip(statuses, errors, strict=True))
                if s != status or (only is not None and not only(e))
            ]
            if len(keep) == len(statuses):
                continue
            dropped += len(statuses) - len(keep)
            if keep:
                kept = table.take(pa.array(keep, pa.int64()))
                buffer = pa.BufferOutputStream()
                pq.write_table(kept, buffer)
                new = self.file_name(kept.column("run_id").to_pylist())
                write_atomic(self.fs, posixpath.join(self.path, new), buffer.getvalue().to_pybytes())
            self.fs.rm(path)
        return dropped

    def forget_infra_failures(self) -> int:
        """:meth:`forget` the runs that failed on infrastructure (status ``error`` whose error is not the
        model's answer, :func:`~coa.agents.backend.infra_failure`); those the model failed stay."""
        return self.forget(FAILED_STATUS, only=infra_failure)

    def remove(self) -> None:
        if self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)


@dataclasses.dataclass
class CollectOutcome:
    planned: int
    resumed: int  # runs found already checkpointed
    ran: int
    budget_stopped: bool

    @property
    def complete(self) -> bool:
        return not self.budget_stopped


class CircuitBreaker:
    """Trips after ``limit`` runs in a row ended in an infrastructure error (0: never).

    A run that failed because of what the model answered (off-protocol, context too long) is data, not
    infrastructure: it resets the streak like a finished run."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streak = 0
        self.last_error: str | None = None
        self.tripped = False

    def record(self, row: Mapping[str, Any]) -> bool:
        """Count a finished run; whether the breaker is (now) open."""
        if row.get("status") == FAILED_STATUS and infra_failure(row.get("error")):
            self.streak += 1
            self.last_error = row.get("error")
            if self.limit and self.streak >= self.limit:
                self.tripped = True
        else:
            self.streak = 0
        return self.tripped


async def collect_runs(
    teacher: Teacher,
    planned: Sequence[PlannedRun],
    checkpoints: CheckpointFolder,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
    breaker: CircuitBreaker | None = None,
) -> CollectOutcome:
    """Run every planned run that has no checkpoint yet, ``concurrency`` at a time; with a
    ``breaker``, stop starting runs once it trips (the caller raises)."""
    done = checkpoints.done()
    todo = [p for p in planned if p.run_id not in done]
    resumed = len(planned) - len(todo)
    finished = resumed
    stop = asyncio.Event()
    queue: asyncio.Queue[PlannedRun] = asyncio.Queue()
    for p in todo:
        queue.put_nowait(p)
    if progress:
        progress(finished, len(planned))

    async def worker() -> None:
        nonlocal finished
        while not stop.is_set():
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                row = await teacher.solve(item.task, item.sample_index, run_id=item.run_id)
            except BudgetStop:
                stop.set()
                return
            due = checkpoints.add(row)
            if due:
                await asyncio.to_thread(checkpoints.write_batch, due)
            finished += 1
            if progress:
                progress(finished, len(planned))
            if breaker is not None and breaker.record(row):
                tripped.set()
                return

    tripped = asyncio.Event()
    workers: list[asyncio.Future[Any]] = [asyncio.ensure_future(worker()) for _ in range(max(1, concurrency))]
    watch: asyncio.Future[Any] = asyncio.ensure_future(tripped.wait())
    try:
        running: set[asyncio.Future[Any]] = set(workers)
        while running and not tripped.is_set():
            ended, running = await asyncio.wait(running | {watch}, return_when=asyncio.FIRST_COMPLETED)
            running.discard(watch)
            for future in ended - {watch}:
                future.result()  # a worker's error ends the collection
    finally:  # also on a tripped breaker, an error or an interrupt: the runs in flight are redone on
        # the rerun; what finished is kept for the resume
        watch.cancel()
        for future in workers:
            future.cancel()
        await asyncio.gather(*workers, watch, return_exceptions=True)
        checkpoints.write_batch(checkpoints.drain())
    return CollectOutcome(len(planned), resumed, finished - resumed, stop.is_set())


def summarize(table: pa.Table) -> dict[str, Any]:
    """Headline numbers of a trajectory table: success, tokens, tool calls, cost, errors by kind."""
    rows = table.select(
        [
            "status",
            "error",
            "correct",
            "prompt_tokens",
            "completion_tokens",
            "n_tool_calls",
            "cost_usd",
            "steps",
        ]
    ).to_pylist()
    n = len(rows)
    errors: collections.Counter[str] = collections.Counter()
    tools: collections.Counter[str] = collections.Counter()
    for r in rows:
        for s in r["steps"]:
            if s["error"]:
                errors[s["error"].split(":", 1)[0]] += 1
            if s["role"] == "tool_call" and s["tool_name"]:
                tools[s["tool_name"]] += 1
    statuses = collections.Counter(r["status"] for r in rows)
    failed = sum(1 for r in rows if r["status"] == FAILED_STATUS and infra_failure(r["error"]))
    scored = [r["correct"] for r in rows if r["correct"] is not None]
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    return {
        "runs": n,
        "completed": statuses.get("completed", 0),
        "completion_rate": statuses.get("completed", 0) / n if n else 0.0,
        "accuracy": sum(scored) / len(scored) if scored else None,
        "statuses": dict(statuses),
        "failed_share": failed / n if n else 0.0,
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "tool_calls": dict(tools),
        "cost_usd": sum(costs) if costs else None,
        "errors_by_kind": dict(errors),
    }


class CollectionIncomplete(CheckFailed, RuntimeError):
    """Collection stopped before every planned run finished (e.g. the budget ran out)."""


FAILED_STATUS = "error"
"""The status of a run the model backend failed: an endpoint down or retries exhausted
(infrastructure), or a model that answered off the agents' protocol (the run's own failure; its
error starts with one of :data:`~coa.agents.backend.DATA_ERROR_KINDS`)."""


class CollectionFailed(InfraError, RuntimeError):
    """Too many runs failed on infrastructure for the collection to be a dataset (exit 3)."""


def check_failed_share(
    checkpoints: CheckpointFolder,
    run_ids: Sequence[str],
    max_share: float,
    retry_hint: str,
    total: int | None = None,
) -> dict[str, float | int]:
    """The failed share of a finished collection of ``total`` runs (default: ``run_ids``, the
    checkpointed ones read here); raises :class:`CollectionFailed` (after dropping the failed runs from
    the checkpoints, so the rerun runs them again) when every run failed or more than ``max_share`` did."""
    total = len(run_ids) if total is None else total
    statuses = checkpoints.statuses(run_ids)
    errors = [e for s, e in statuses.values() if s == FAILED_STATUS and infra_failure(e)]
    share = len(errors) / total if total else 0.0
    if errors and (len(errors) == total or share > max_share):
        example = " ".join(str(errors[0]).split())[:160]
        checkpoints.forget_infra_failures()
        raise CollectionFailed(
            f"the collection failed as a whole: {len(errors)} of {total} runs ({share:.0%}; "
            f"collect.max_failed_share={max_share:g}) ended in an infrastructure error, e.g. {example!r}; "
            f"nothing was committed, the {total - len(errors)} finished run(s) are kept: {retry_hint}"
        )
    return {"failed": len(errors), "failed_share": share}
