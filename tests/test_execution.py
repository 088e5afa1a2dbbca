"""Sharded collection, curation and conversion (coa.execution) commit what the one-process build commits.

The shards run one after another in this process (:class:`coa.execution.InProcessExecutor`): the
same split, checkpoints and merge as on Ray (tests/tasks/test_fanout.py), without a cluster.
"""

from __future__ import annotations

import pytest

from coa.collect import CheckpointFolder
from coa.collect.runs import plan_runs
from coa.collect.shards import collect_sharded, shard_config
from coa.execution import ExecutionConfig, InProcessExecutor, shard_ranges
from tests.fanout_helpers import demo_config, local_rebuilds, manifest_hashes, run, without_timing

pytestmark = pytest.mark.sandbox  # the offline teacher and the scoring run code in the sandbox


def test_shard_ranges_cover_the_plan_once() -> None:
    assert shard_ranges(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert shard_ranges(2, 8) == [(0, 1), (1, 2)]
    assert shard_ranges(0, 4) == []
    for total in (1, 7, 64, 65):
        for shards in (1, 2, 5, 100):
            ranges = shard_ranges(total, shards)
            assert [i for a, b in ranges for i in range(a, b)] == list(range(total))


def test_execution_defaults_to_one_process() -> None:
    assert demo_config().execution == ExecutionConfig()
    assert ExecutionConfig().engine == "local"


def test_shards_split_the_budget() -> None:
    cfg = demo_config().collect.model_copy(
        update={"llm": demo_config().collect.llm.model_copy(update={"budget_tokens": 1000})}
    )
    assert shard_config(cfg, 25, 100).llm.budget_tokens == 250


def test_sharded_build_commits_the_local_artifacts(tmp_path) -> None:
    cfg = demo_config(arithmetic=6, multihop=6, programming=3)
    local = run(cfg, str(tmp_path / "local"), None)
    root = str(tmp_path / "sharded")
    sharded = run(cfg, root, InProcessExecutor(shards=4))
    # collection: same content key, the same runs in the same order (wall-clock values aside)
    assert sharded["collect"].ref.key == local["collect"].ref.key
    raw_local, raw_sharded = local["collect"].ref, sharded["collect"].ref
    from coa import io

    assert without_timing(io.read_table(raw_sharded, "trajectories")) == without_timing(
        io.read_table(raw_local, "trajectories")
    )
    # curation and conversion of the same inputs, sharded vs one process: same key, byte-identical tables
    for name, (built, again) in local_rebuilds(cfg, sharded, root).items():
        assert again.ref.key == built.ref.key, name
        assert manifest_hashes(again) == manifest_hashes(built), name
    assert sharded["curate"].summary["rows_kept"] == local["curate"].summary["rows_kept"] > 0
    assert sharded["convert"].ref.rows("sft") == local["convert"].ref.rows("sft") > 0


def test_a_shard_whose_runs_are_checkpointed_is_not_run_again(tmp_path) -> None:
    cfg = demo_config(multihop=8)
    done = run(cfg, str(tmp_path / "s"), None, curate=False)
    from coa import io
    from coa.tools.collection import Collection

    planned = plan_runs(io.read_table(done["synthetic"].ref, "train"), 1)
    pages = Collection.from_table(io.read_table(done["synthetic"].ref, "encyclopedia"))  # what shards search
    folder = CheckpointFolder(str(tmp_path / "ckpt"))
    first = collect_sharded(
        InProcessExecutor(shards=2), cfg.collect, planned[:4], folder, str(tmp_path), collection=pages
    )
    assert (first.resumed, first.ran) == (0, 4)
    calls: list[int] = []

    class Counting(InProcessExecutor):
        def map(self, fn, items, name):  # type: ignore[override]
            calls.append(len(items))
            return super().map(fn, items, name)

    second = collect_sharded(
        Counting(shards=2), cfg.collect, planned, folder, str(tmp_path), collection=pages
    )
    assert calls == [1]  # the first shard (runs 0-3) was committed: only the second is submitted
    assert (second.resumed, second.ran) == (4, len(planned) - 4)
    assert sorted(folder.done()) == sorted(p.run_id for p in planned)
