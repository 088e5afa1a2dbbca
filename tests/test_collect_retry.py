"""``--retry-failed``: a new artifact that keeps finished runs and re-runs only the failed ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import schemas
from coa import io
from coa.collect import step as collect_step
from coa.collect.config import CollectConfig
from coa.steps import Step, TableInput, run_step
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
    task_input = _task_input(store, 3)
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
    first = run_step(_step(config, task_input), store)
    before = io.read_table(first.ref).to_pylist()
    assert [r["status"] for r in before] == ["completed", "error", "completed"]
    calls_before = len(server.requests)

    server.push(*happy_replies())  # the endpoint is healthy again
    repaired = run_step(
        collect_step.retry_step(
            config, TableInput(first.ref, "trajectories"), task_input, encyclopedia=_pages(task_input)
        ),
        store,
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
    assert run_step(_step(switched, task_input), store).reused


def _endpoint_config(
    server: FakeLLMServer, cache_root: Path | None = None, **collect: object
) -> CollectConfig:
    endpoint = {
        "name": "fake", "base_url": server.url, "model": "fake-model", "max_retries": 1,
        "backoff_base_s": 0.01, "backoff_max_s": 0.02, "timeout_s": 2.0, "max_tokens": 64,
    }  # fmt: skip
    llm = {"endpoints": [endpoint], "cache": cache_root is not None}
    if cache_root is not None:
        llm["cache_root"] = str(cache_root)
    return CollectConfig.model_validate(
        {"backend": "endpoint", "concurrency": 1, "llm": llm, "tools": {"record": "off"},
         "teacher": {"reflect_every": 1}, **collect}
    )  # fmt: skip


def _task_input(store: io.Store, n: int) -> TableInput:
    """``n`` tasks about Zorvak, in an artifact that carries their encyclopedia (as the synthetic
    step's does)."""
    writer = store.writer("tasks", "z", {"n": n})
    writer.write_table("tasks", tasks(n), schemas.TASK)
    pages = [{"doc_id": "company-0000", "title": "Zorvak", "text": "Zorvak was founded by Mira Tolen."}]
    writer.write_table("encyclopedia", schemas.DOCUMENT.from_rows(pages), schemas.DOCUMENT)
    return TableInput(writer.commit(), "tasks")


def _step(config: CollectConfig, task_input: TableInput) -> Step:
    """The collection of ``task_input``, its local search serving the artifact's encyclopedia."""
    return collect_step.step(config, task_input, encyclopedia=_pages(task_input))


def _pages(task_input: TableInput) -> TableInput:
    return TableInput(task_input.ref, "encyclopedia")


def test_retry_failed_bypasses_the_cache_and_counts_the_requests(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    """The failed run's first call was answered (and cached) before the endpoint failed: the retry
    sends it again instead of replaying the reply that led to the failure."""
    store = io.Store(str(tmp_path / "store"))
    task_input = _task_input(store, 2)
    config = _endpoint_config(server, tmp_path / "cache")
    server.reset()
    server.push(*happy_replies())  # task 0 completes
    server.push(ok("1. plan"), *[Reply(status=500, body={"error": {"message": "boom"}})] * 2)  # task 1 fails
    first = run_step(_step(config, task_input), store)
    assert [r["status"] for r in io.read_table(first.ref).to_pylist()] == ["completed", "error"]
    sent_before = len(server.requests)
    server.push(*happy_replies())
    repaired = run_step(
        collect_step.retry_step(
            config, TableInput(first.ref, "trajectories"), task_input, encyclopedia=_pages(task_input)
        ),
        store,
    )
    sent = len(server.requests) - sent_before
    first_sent = server.requests[sent_before].body["messages"][-1]["content"]
    assert first_sent == "Task:\nWho founded Zorvak? (1)"  # the plan call was sent, not replayed
    assert repaired.summary["repaired"]["requests_sent"] == sent == len(happy_replies())
    rows = io.read_table(repaired.ref).to_pylist()
    assert [r["status"] for r in rows] == ["completed", "completed"]
    plans = [s["text"] for s in rows[1]["steps"] if s["role"] == "plan"]
    assert plans and "1. plan" not in plans[0]  # the retried run planned anew


def test_a_collection_whose_runs_all_failed_is_not_a_success(server: FakeLLMServer, tmp_path: Path) -> None:
    """An endpoint down for the whole collection: exit 3, nothing committed; the rerun runs them again."""
    from coa.collect.runs import CollectionFailed
    from coa.steps import address, resolve

    store = io.Store(str(tmp_path / "store"))
    task_input = _task_input(store, 3)
    config = _endpoint_config(server)
    server.reset()
    server.default = Reply(status=500, body={"error": {"message": "down"}})
    step = _step(config, task_input)
    with pytest.raises(CollectionFailed, match=r"failed as a whole: 3 of 3 runs \(100%") as failed:
        run_step(step, store)
    assert failed.value.exit_code == 3 and "\n" not in str(failed.value)
    uri, _ = address(step, resolve(step, {}), store)
    assert io.lookup(uri) is None  # nothing committed
    server.default = Reply()
    for _ in range(3):
        server.push(*happy_replies())
    again = run_step(step, store)
    assert again.ref.uri == uri and again.summary["failed_share"] == 0.0
    assert [r["status"] for r in io.read_table(again.ref).to_pylist()] == ["completed"] * 3
    assert again.summary["collect"]["ran"] == 3  # the failed runs were run again, not resumed


def test_more_than_the_allowed_share_failing_is_not_a_success(server: FakeLLMServer, tmp_path: Path) -> None:
    from coa.collect.runs import CollectionFailed

    store = io.Store(str(tmp_path / "store"))
    task_input = _task_input(store, 3)
    server.reset()
    server.push(*happy_replies())  # one of three completes: 67% failed
    server.default = Reply(status=500, body={"error": {"message": "down"}})
    strict = _endpoint_config(server, max_failed_share=0.5)
    with pytest.raises(CollectionFailed, match=r"2 of 3 runs \(67%; collect.max_failed_share=0.5\)"):
        run_step(_step(strict, task_input), store)
    server.push(*happy_replies())
    lenient = _endpoint_config(server, max_failed_share=0.9)  # another key: collected anew
    result = run_step(_step(lenient, task_input), store)
    assert result.summary["failed_share"] == pytest.approx(2 / 3)  # in the summary either way
