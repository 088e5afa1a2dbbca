"""Collection: bounded fan-out, batched checkpoints of finished runs, resume without loss or duplicates."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import schemas
from coa.agents.backend import BudgetStop
from coa.collect import CheckpointFolder, collect_runs, plan_runs, summarize
from tests.agents.test_runtime import ScriptedBackend, happy_script, tools


def task_table(n: int) -> pa.Table:
    return schemas.TASK.from_rows(
        [
            {
                "task_id": f"t:{i}",
                "source": "t",
                "family": "mhqa",
                "question": f"Who founded Zorvak {i}?",
                "gold_answers": ["Mira Tolen"],
                "source_index": i,
                "metadata": "{}",
            }
            for i in range(n)
        ]
    )


class CountingTeacher:
    """Solves with the real runtime on a scripted backend; can crash after N runs."""

    def __init__(self, crash_after: int | None = None, budget_after: int | None = None) -> None:
        self.solved: list[str] = []
        self.crash_after, self.budget_after = crash_after, budget_after
        self.in_flight = 0
        self.max_in_flight = 0

    async def solve(
        self, task: dict[str, Any], sample_index: int = 0, run_id: str | None = None
    ) -> dict[str, Any]:
        from coa.agents.runtime import MultiAgentTeacher, TeacherConfig

        if self.crash_after is not None and len(self.solved) >= self.crash_after:
            raise KeyboardInterrupt("simulated kill")
        if self.budget_after is not None and len(self.solved) >= self.budget_after:
            raise BudgetStop("budget reached")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        teacher = MultiAgentTeacher(ScriptedBackend(happy_script()), tools(), TeacherConfig(reflect_every=1))
        row = await teacher.solve(task, sample_index, run_id)
        self.in_flight -= 1
        self.solved.append(row["run_id"])
        return row


def test_collect_all_with_bounded_concurrency(tmp_path: Path) -> None:
    planned = plan_runs(task_table(6), samples_per_task=2)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"))
    teacher = CountingTeacher()
    outcome = asyncio.run(collect_runs(teacher, planned, ckpt, concurrency=3))
    assert outcome.planned == 12 and outcome.ran == 12 and outcome.complete
    assert 1 < teacher.max_in_flight <= 3
    table = pa.concat_tables(ckpt.read([p.run_id for p in planned]))
    assert table.column("run_id").to_pylist() == [p.run_id for p in planned]
    summary = summarize(table)
    assert (
        summary["runs"] == 12
        and summary["completion_rate"] == 1.0
        and summary["tool_calls"] == {"web_search": 12}
    )


def test_crash_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    planned = plan_runs(task_table(8), samples_per_task=1)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"))
    first = CountingTeacher(crash_after=3)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(collect_runs(first, planned, ckpt, concurrency=1))
    assert len(ckpt.done()) == 3
    second = CountingTeacher()
    outcome = asyncio.run(collect_runs(second, planned, ckpt, concurrency=2))
    assert outcome.resumed == 3 and outcome.ran == 5
    assert set(second.solved).isdisjoint(first.solved)  # nothing redone
    ids = pa.concat_tables(ckpt.read([p.run_id for p in planned])).column("run_id").to_pylist()
    assert ids == [p.run_id for p in planned] and len(set(ids)) == 8


def test_budget_stop_is_clean_and_resumable(tmp_path: Path) -> None:
    planned = plan_runs(task_table(5), samples_per_task=1)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"))
    outcome = asyncio.run(collect_runs(CountingTeacher(budget_after=2), planned, ckpt, concurrency=1))
    assert outcome.budget_stopped and outcome.ran == 2 and len(ckpt.done()) == 2
    rest = asyncio.run(collect_runs(CountingTeacher(), planned, ckpt, concurrency=1))
    assert rest.resumed == 2 and rest.ran == 3 and rest.complete


def test_temporary_checkpoint_files_are_not_counted(tmp_path: Path) -> None:
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / (CheckpointFolder.file_name(["t:0#0"]) + ".tmp-1234")).write_bytes(b"half")
    (tmp_path / "ckpt" / (".tmp-abcd-" + CheckpointFolder.file_name(["t:1#0"]))).write_bytes(b"half")
    assert ckpt.done() == set()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def test_runs_are_checkpointed_in_batches_and_read_back_in_plan_order(tmp_path: Path) -> None:
    planned = plan_runs(task_table(10), samples_per_task=1)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"), batch_rows=4, batch_seconds=3600)
    outcome = asyncio.run(collect_runs(CountingTeacher(), planned, ckpt, concurrency=3))
    assert outcome.ran == 10
    sizes = sorted(len(pq.read_table(f)) for f in _files(tmp_path / "ckpt"))
    assert sizes == [2, 4, 4]  # two full batches, the rest flushed when the collection ended
    ids = [p.run_id for p in planned]
    parts = list(ckpt.read(ids[::-1], chunk=3))
    assert [len(t) for t in parts] == [3, 3, 3, 1]
    assert pa.concat_tables(parts).column("run_id").to_pylist() == ids[::-1]


def test_a_batch_is_flushed_after_batch_seconds(tmp_path: Path) -> None:
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"), batch_rows=1000, batch_seconds=0.05)
    row = {"run_id": "a"}
    assert ckpt.add(row) is None
    time.sleep(0.06)
    assert ckpt.add({"run_id": "b"}) == [row, {"run_id": "b"}]
    assert ckpt.drain() == []


def test_an_interrupt_flushes_the_runs_that_finished(tmp_path: Path) -> None:
    planned = plan_runs(task_table(8), samples_per_task=1)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"), batch_rows=100, batch_seconds=3600)
    first = CountingTeacher(crash_after=5)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(collect_runs(first, planned, ckpt, concurrency=1))
    assert ckpt.done() == set(first.solved) and len(first.solved) == 5
    assert len(_files(tmp_path / "ckpt")) == 1


def test_reading_a_run_without_checkpoint_says_which(tmp_path: Path) -> None:
    planned = plan_runs(task_table(2), samples_per_task=1)
    ckpt = CheckpointFolder(str(tmp_path / "ckpt"))
    asyncio.run(collect_runs(CountingTeacher(), planned, ckpt, concurrency=1))
    with pytest.raises(KeyError, match="no checkpoint"):
        list(ckpt.read([planned[0].run_id, "t:99#0"]))


def test_batch_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_rows"):
        CheckpointFolder(str(tmp_path / "ckpt"), batch_rows=0)


def test_limit_is_stratified_by_family_and_warns_when_a_family_is_left_out() -> None:
    import collections

    import pyarrow as pa

    from coa.collect.runs import limit_tasks

    table = pa.table({"family": ["math"] * 60 + ["mhqa"] * 30 + ["code"] * 10, "i": list(range(100))})

    def counts(t: pa.Table) -> dict[str, int]:
        return dict(collections.Counter(t.column("family").to_pylist()))

    ten, warnings = limit_tasks(table, 10)
    assert counts(ten) == {"math": 6, "mhqa": 3, "code": 1} and warnings == []
    assert ten.column("i").to_pylist()[:6] == [0, 1, 2, 3, 4, 5]  # the first tasks of each family
    three, warnings = limit_tasks(table, 3)
    assert counts(three) == {"math": 1, "mhqa": 1, "code": 1} and warnings == []
    two, warnings = limit_tasks(table, 2)
    assert sum(counts(two).values()) == 2 and len(warnings) == 1 and "'code'" in warnings[0]
    chosen, warnings = limit_tasks(table, per_family={"math": 5, "code": 3})
    assert counts(chosen) == {"math": 5, "code": 3} and "'mhqa'" in warnings[0]
    assert limit_tasks(table)[0] is table


def test_one_limit_at_a_time() -> None:
    from coa.collect.config import CollectConfig

    with pytest.raises(ValueError, match="not both"):
        CollectConfig(limit=3, limit_per_family={"math": 2})
