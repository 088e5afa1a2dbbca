"""Task stats kept as columns give the counts of a dict of lists, sorted, in slices; old JSON reads."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

import schemas
from coa.curate.task_stats import TaskStats, from_json


def _counted() -> tuple[TaskStats, dict[str, list[int]]]:
    rnd = random.Random(3)
    ids = [f"t{i}" for i in range(40)] + ["é-task", "Z", 'a"quote', "日本"]
    expected: dict[str, list[int]] = {}
    stats = TaskStats()
    for _ in range(10):
        task_ids = [rnd.choice(ids) for _ in range(50)]
        correct = [rnd.choice([True, False, None]) for _ in range(50)]
        for t, ok in zip(task_ids, correct, strict=True):
            entry = expected.setdefault(t, [0, 0])
            entry[0] += 1
            entry[1] += int(bool(ok))
        stats.add(pa.table({"task_id": task_ids, "correct": pa.array(correct, pa.bool_())}))
    return stats, expected


def test_the_counts_of_a_dict_of_lists_sorted_in_slices() -> None:
    stats, expected = _counted()
    assert stats.disk_bytes > 0  # the batches' counts wait on disk, not in memory
    parts = list(stats.tables(rows=10))
    assert [p.num_rows for p in parts] == [10, 10, 10, 10, 4]
    table = schemas.TASK_STATS.conform(pa.concat_tables(parts))
    rows = table.to_pylist()
    assert [r["task_id"] for r in rows] == sorted(expected)
    assert {r["task_id"]: [r["runs"], r["correct"]] for r in rows} == expected
    with pytest.raises(RuntimeError, match="finished"):
        stats.add(pa.table({"task_id": ["late"], "correct": pa.array([True])}))
    stats.close()
    assert stats.disk_bytes == 0


def test_no_runs_give_one_empty_table() -> None:
    parts = list(TaskStats().tables())
    assert len(parts) == 1 and parts[0].num_rows == 0
    schemas.TASK_STATS.conform(parts[0])


def test_an_old_artifacts_json_reads_into_the_same_frame() -> None:
    stats, expected = _counted()
    assert from_json(json.dumps(expected, sort_keys=True)).equals(stats.frame())
    assert from_json("{}").height == 0


def test_ranges_of_task_ids_give_the_same_sorted_counts() -> None:
    stats, expected = _counted()
    whole = pa.concat_tables(list(stats.tables(rows=7)))
    ranged = list(stats.tables(rows=7, part_rows=40))  # ~330 spilled rows: ~9 ranges of task ids
    assert all(0 < p.num_rows <= 7 for p in ranged) and len(ranged) > len(expected) // 7 + 1
    table = pa.concat_tables(ranged)
    assert table.equals(whole)
    assert table.column("task_id").to_pylist() == sorted(expected)
    stats.close()
