"""``--retry-failed``: a new artifact that keeps finished runs and re-runs only the failed ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import schemas
from coa import io
from coa.collect import step as collect_step
from coa.collect.config import CollectConfig
from coa.steps import TableInput, run_step
from tests.agents.test_endpoint_teacher import happy_replies, ok, tasks
from tests.llm.fake_server import FakeLLMServer, Reply


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def test_retry_failed_reruns_only_the_failed_runs(server: FakeLLMServer, tmp_path: Path) -> None:
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("tasks", "z", {"n": 3})
    writer.write_table("tasks", tasks(3), schemas.TASK)
    task_input = TableInput(writer.commit(), "tasks")
    endpoint = {
        "name": "fake", "base_url": server.url, "model": "fake-model", "max_retries": 1,
        "backoff_base_s": 0.01, "backoff_max_s": 0.02, "timeout_s": 2.0, "max_tokens": 64,
    }  # fmt: skip
    config = CollectConfig.model_validate(
        {
            "backend": "endpoint",
            "concurrency": 1,
            "llm": {"endpoints": [endpoint], "cache": False},
            "tools": {"record": "off"},
            "teacher": {"reflect_every": 1},
        }
    )
    server.reset()
    server.push(*happy_replies())  # task 0 completes
    server.push(
        ok("1. plan"), *[Reply(status=500, body={"error": {"message": "boom"}})] * 2
    )  # task 1: retries out
    server.push(*happy_replies())  # task 2 completes
    first = run_step(collect_step.step(config, task_input), store)
    before = io.read_table(first.ref).to_pylist()
    assert [r["status"] for r in before] == ["completed", "error", "completed"]
    calls_before = len(server.requests)

    server.push(*happy_replies())  # the endpoint is healthy again
    repaired = run_step(
        collect_step.retry_step(config, TableInput(first.ref, "trajectories"), task_input), store
    )
    after = io.read_table(repaired.ref).to_pylist()
    assert len(after) == len(before) == 3  # nothing lost, nothing duplicated
    assert [r["run_id"] for r in after] == [r["run_id"] for r in before]
    assert [r["status"] for r in after] == ["completed", "completed", "completed"]
    assert after[0] == before[0] and after[2] == before[2]  # finished runs kept as they were
    assert len(server.requests) - calls_before == len(happy_replies())  # only the failed run was sent
    lineage = io.read_lineage(repaired.ref)
    assert lineage["repaired"]["of"] == first.ref.uri and lineage["repaired"]["retried"] == 1
    assert lineage["repaired"]["still_failed"] == 0
    assert repaired.ref.uri != first.ref.uri
    # the switch is not part of the first collection's identity: turning it on reuses it
    switched = config.model_copy(update={"retry_failed": True})
    assert run_step(collect_step.step(switched, task_input), store).reused
