"""Fan-out on Ray (tasks/fanout.py): shards as Prefect tasks on a local 2-CPU Ray cluster.

* a Ray-run collection, curation and conversion give the artifacts of the one-process run: the
  collection has the same content key and the same runs in the same order (wall-clock values aside:
  they differ between any two runs), and curating (converting) the same inputs on Ray or in one
  process gives the same key and byte-identical tables;
* killing the Ray worker of a collection shard mid-run loses and duplicates nothing: Ray re-runs the
  shard, which resumes from its checkpoints, and the table holds every planned run exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from prefect.client.orchestration import get_client
from prefect.testing.utilities import prefect_test_harness

from coa import io
from coa.collect import step as collect_step
from coa.collect.runs import CheckpointFolder, plan_runs
from coa.execution import ExecutionConfig, shard_ranges
from coa.steps import StepResult, Upstream, address, resolve, run_step
from coa.synthetic import step as synthetic_step
from tasks.fanout import RayExecutor
from tests.fanout_helpers import demo_config, local_rebuilds, manifest_hashes, run, without_timing

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A Prefect server and a local Ray cluster (127.0.0.1, 2 CPUs) for the module, stopped after it."""
    with prefect_test_harness(server_startup_timeout=120):
        ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
        try:
            yield
        finally:
            ray.shutdown()


def shard_runs(expected: dict[str, str], wait_s: float = 20.0) -> dict[str, str]:
    """Name → final state of the shard task runs the Prefect server recorded.

    Task run states reach the server as events, recorded a moment later: wait (bounded) until the
    expected ones are there."""
    steps = {"collect", "curate-score", "convert"}
    deadline = time.monotonic() + wait_s
    while True:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs()
        found = {r.name: r.state.type.value for r in runs if r.name.split("-shard-")[0] in steps and r.state}
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def checkpointed(folder: Path) -> set[str]:
    """Run ids in the collection's checkpoint folder now (none while it does not exist yet)."""
    try:
        return CheckpointFolder(str(folder)).done()
    except FileNotFoundError:  # a file replaced while it was read: look again on the next poll
        return set()


def test_ray_collection_and_curation_give_the_local_artifacts(tmp_path: Path, cluster: None) -> None:
    cfg = demo_config(arithmetic=6, multihop=6, programming=3)
    local = run(cfg, str(tmp_path / "local"), None)
    root = str(tmp_path / "ray")
    executor = RayExecutor(ExecutionConfig(engine="ray", shards=3))
    try:
        sharded = run(cfg, root, executor)
    finally:
        executor.close()
    expected = {
        **{f"collect-shard-{i}": "COMPLETED" for i in range(3)},
        **{f"curate-score-shard-{i}": "COMPLETED" for i in range(3)},
        **{f"convert-shard-{i}": "COMPLETED" for i in range(3)},
    }
    assert shard_runs(expected) == expected
    assert sharded["collect"].ref.key == local["collect"].ref.key
    ray_rows = without_timing(io.read_table(sharded["collect"].ref, "trajectories"))
    assert ray_rows == without_timing(io.read_table(local["collect"].ref, "trajectories"))
    assert len(ray_rows) == 15
    for name, (built, again) in local_rebuilds(cfg, sharded, root).items():
        assert again.ref.key == built.ref.key, name
        assert manifest_hashes(again) == manifest_hashes(built), name
    assert sharded["curate"].summary["rows_kept"] == local["curate"].summary["rows_kept"] > 0
    assert sharded["convert"].ref.rows("sft") == local["convert"].ref.rows("sft") > 0


@pytest.mark.serial  # the kill must land after a checkpoint
def test_killing_a_shard_worker_loses_and_duplicates_nothing(tmp_path: Path, cluster: None) -> None:
    cfg = demo_config(multihop=80)
    cfg = cfg.model_copy(update={"collect": cfg.collect.model_copy(update={"concurrency": 1})})
    store = io.Store(str(tmp_path / "store"))
    done = {"synthetic": run_step(synthetic_step.step(cfg.synthetic), store)}
    pages = Upstream("synthetic", "encyclopedia")
    collect = collect_step.step(cfg.collect, Upstream("synthetic", "train"), encyclopedia=pages)
    uri, _ = address(collect, resolve(collect, done), store)
    folder = Path(store.checkpoint_uri(uri))
    executor = RayExecutor(ExecutionConfig(engine="ray", shards=2, flush_seconds=0, max_retries=2))
    outcome: dict[str, Any] = {}

    def collect_on_ray() -> None:
        try:
            outcome["result"] = run_step(collect, store, done, executor=executor)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = e

    planned = [p.run_id for p in plan_runs(io.read_table(done["synthetic"].ref, "train"), 1)]
    ranges = [planned[start:stop] for start, stop in shard_ranges(len(planned), executor.shards)]
    thread = threading.Thread(target=collect_on_ray, daemon=True)
    thread.start()
    killed: int | None = None
    deadline = time.monotonic() + 90
    try:
        while thread.is_alive() and killed is None and time.monotonic() < deadline:
            # every shard has flushed runs, so whichever worker dies, its re-run has some to resume
            flushed = checkpointed(folder)
            if all(len(flushed.intersection(ids)) >= 2 for ids in ranges):
                for proc in psutil.process_iter(["pid", "cmdline"]):
                    if " ".join(proc.info["cmdline"] or []).startswith("ray::shard"):
                        proc.kill()  # the worker process running a collection shard
                        killed = proc.info["pid"]
                        break
            time.sleep(0.01)
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        executor.close()
    assert not thread.is_alive(), "the collection did not finish in time"
    assert "error" not in outcome, outcome.get("error")
    assert killed is not None, "no shard worker was found running to kill"
    result: StepResult = outcome["result"]
    run_ids = io.read_table(result.ref, "trajectories").column("run_id").to_pylist()
    assert run_ids == planned  # every planned run exactly once, in plan order
    assert result.summary["collect"]["resumed"] > 0  # the re-run shard resumed from its checkpoints
    assert result.summary["collect"]["resumed"] + result.summary["collect"]["ran"] == len(planned)
