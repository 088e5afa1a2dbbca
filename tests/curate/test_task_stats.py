"""Task stats kept as columns write the same JSON as the dict of lists they replace."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from coa.curate import task_stats
from coa.curate.task_stats import TaskStats


def test_same_json_as_a_dict_of_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_stats, "MERGE_EVERY", 3)  # merges happen within the test
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
    assert stats.to_json() == json.dumps(expected, sort_keys=True)
    assert len(stats._parts) < 3
    assert TaskStats().to_json() == json.dumps({}, sort_keys=True)
