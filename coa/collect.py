"""Collection: fan tasks out to the teacher with bounded concurrency, checkpoint every finished run.

Each finished run is written at once as a one-row ``trajectory.v1`` Parquet file in a checkpoint
folder (temporary name, then renamed), so a crash or a kill loses at most the runs in flight. A
rerun with the same inputs finds the folder, skips the runs already there and runs only the rest;
when every planned run is done the rows are assembled, in plan order, into the committed artifact.
A run the budget stopped is not checkpointed: it is redone on the next resume.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from coa.agents.backend import BudgetStop
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


def plan_runs(tasks: pa.Table, samples_per_task: int) -> list[PlannedRun]:
    """One planned run per (task, sample), with stable ids."""
    return [
        PlannedRun(f"{t['task_id']}#{k}", t, k) for t in tasks.to_pylist() for k in range(samples_per_task)
    ]


class CheckpointFolder:
    """One Parquet file per finished run under ``uri``; written atomically, listed to resume."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.path = filesystem(self.uri)

    @staticmethod
    def file_name(run_id: str) -> str:
        return hashlib.sha256(run_id.encode()).hexdigest()[:32] + ".parquet"

    def done(self) -> set[str]:
        """File names of committed checkpoints (temporary files are ignored)."""
        if not self.fs.exists(self.path):
            return set()
        names = (posixpath.basename(p) for p in self.fs.ls(self.path, detail=False))
        return {n for n in names if n.endswith(".parquet") and not n.startswith(".")}  # .tmp-*: unfinished

    def write(self, row: dict[str, Any]) -> None:
        buffer = pa.BufferOutputStream()
        pq.write_table(schemas.TRAJECTORY.from_rows([row]), buffer)
        write_atomic(
            self.fs, posixpath.join(self.path, self.file_name(row["run_id"])), buffer.getvalue().to_pybytes()
        )

    def read(self, run_ids: Sequence[str]) -> Iterator[pa.Table]:
        for run_id in run_ids:
            with self.fs.open(posixpath.join(self.path, self.file_name(run_id)), "rb") as fh:
                yield schemas.TRAJECTORY.conform(pq.read_table(fh))

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


async def collect_runs(
    teacher: Teacher,
    planned: Sequence[PlannedRun],
    checkpoints: CheckpointFolder,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> CollectOutcome:
    """Run every planned run that has no checkpoint yet, ``concurrency`` at a time."""
    done = checkpoints.done()
    todo = [p for p in planned if CheckpointFolder.file_name(p.run_id) not in done]
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
            await asyncio.to_thread(checkpoints.write, row)
            finished += 1
            if progress:
                progress(finished, len(planned))

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return CollectOutcome(len(planned), resumed, finished - resumed, stop.is_set())


def summarize(table: pa.Table) -> dict[str, Any]:
    """Headline numbers of a trajectory table: success, tokens, tool calls, cost, errors by kind."""
    rows = table.select(
        ["status", "correct", "prompt_tokens", "completion_tokens", "n_tool_calls", "cost_usd", "steps"]
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
    scored = [r["correct"] for r in rows if r["correct"] is not None]
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    return {
        "runs": n,
        "completed": statuses.get("completed", 0),
        "completion_rate": statuses.get("completed", 0) / n if n else 0.0,
        "accuracy": sum(scored) / len(scored) if scored else None,
        "statuses": dict(statuses),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "tool_calls": dict(tools),
        "cost_usd": sum(costs) if costs else None,
        "errors_by_kind": dict(errors),
    }


def summary_markdown(summary: dict[str, Any], uri: str) -> str:
    lines = [
        "# Collection",
        "",
        f"Artifact: `{uri}`",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    for key in (
        "runs",
        "completed",
        "completion_rate",
        "accuracy",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    ):
        value = summary[key]
        lines.append(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    lines.append(f"| statuses | {json.dumps(summary['statuses'])} |")
    lines.append(f"| tool calls | {json.dumps(summary['tool_calls'])} |")
    lines.append(f"| errors by kind | {json.dumps(summary['errors_by_kind'])} |")
    return "\n".join(lines)


# -- the stage ----------------------------------------------------------------------------------


def checkpoint_uri(store_root: str, artifact_uri: str) -> str:
    """Where the per-run checkpoints of an artifact-in-progress live."""
    return posixpath.join(store_root, "checkpoints", *artifact_uri.rstrip("/").split("/")[-2:])


def run_collect_stage(
    config: Any,
    tasks_ref: Any,
    table: str,
    store: Any,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Collect trajectories for ``tasks_ref[table]`` into a committed ``trajectory.v1`` artifact.

    Resumes from checkpoints; returns (reference, summary). Raises :class:`CollectionIncomplete`
    when the budget stopped it (the finished runs stay checkpointed for the next attempt).
    """
    from coa import io
    from coa.teacher import open_teacher

    writer = store.writer(
        "trajectories",
        config.name,
        {"collect": config.model_dump(mode="json"), "table": table},
        upstream=[tasks_ref],
    )
    existing = writer.existing()
    if existing is not None:
        return existing, summarize(io.read_table(existing))
    tasks = io.read_table(tasks_ref, table)
    if config.limit is not None:
        tasks = tasks.slice(0, config.limit)
    planned = plan_runs(tasks, config.samples_per_task)
    checkpoints = CheckpointFolder(checkpoint_uri(store.root, writer.uri))

    async def run() -> CollectOutcome:
        async with open_teacher(config, store.root) as teacher:
            return await collect_runs(teacher, planned, checkpoints, config.concurrency, progress)

    outcome = asyncio.run(run())
    if outcome.budget_stopped:
        raise CollectionIncomplete(
            f"the LLM budget ran out after {outcome.resumed + outcome.ran} of {outcome.planned} runs; "
            "they are checkpointed: raise collect.llm.budget_tokens / budget_usd and rerun to finish"
        )
    with writer.table_writer("trajectories", schemas.TRAJECTORY) as write:
        pending: list[pa.Table] = []
        for part in checkpoints.read([p.run_id for p in planned]):
            pending.append(part)
            if len(pending) == 256:  # one row group per 256 runs, not one per run
                write(pa.concat_tables(pending))
                pending = []
        if pending:
            write(pa.concat_tables(pending))
    writer.extra_lineage["collect"] = dataclasses.asdict(outcome)
    ref = writer.commit()
    checkpoints.remove()
    return ref, summarize(io.read_table(ref))


class CollectionIncomplete(RuntimeError):
    """Collection stopped before every planned run finished (e.g. the budget ran out)."""
