"""Fail fast: the teacher endpoint is checked before the first run, a circuit breaker stops a
collection whose endpoint died, and a model that answers off the agents' protocol fails its runs
(data), never the stage (infrastructure)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coa import io
from coa.agents.backend import ModelError, ModelUnavailable, infra_failure
from coa.collect.runs import CollectionFailed
from coa.llm.preflight import EndpointUnusable
from coa.steps import run_step
from tests.agents.test_endpoint_teacher import happy_replies
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.test_collect_retry import _endpoint_config, _step, _task_input


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_model_errors_are_data_endpoint_errors_are_infrastructure() -> None:
    parse = ModelError("AgentParsingError", "manager plan: no numbered steps")
    down = ModelUnavailable("LLMRetriesExhausted", "all 3 attempt(s) failed")
    assert parse.exit_code == 1 and down.exit_code == 3
    assert isinstance(down, ModelError)  # recorded as an error step the same way
    assert not infra_failure(str(parse)) and not infra_failure("ContextLengthExceeded: 40000 tokens")
    assert infra_failure(str(down)) and infra_failure(None)


@pytest.mark.parametrize("n", [10, 40])
def test_an_unreachable_teacher_fails_in_seconds_whatever_the_task_count(
    server: FakeLLMServer, tmp_path: Path, n: int
) -> None:
    store = io.Store(str(tmp_path / "store"))
    config = _endpoint_config(server)
    dead = config.llm.endpoints[0].model_copy(
        update={"base_url": f"http://127.0.0.1:{closed_port()}/v1", "max_retries": 4}
    )
    config = config.model_copy(update={"llm": config.llm.model_copy(update={"endpoints": (dead,)})})
    t0 = time.monotonic()
    with pytest.raises(EndpointUnusable, match=r"teacher endpoint 'fake' .* failed its check") as failed:
        run_step(_step(config, _task_input(store, n)), store)
    assert time.monotonic() - t0 < 5
    assert failed.value.exit_code == 3 and "collect.llm.endpoints" in str(failed.value)


def test_an_endpoint_that_does_not_serve_chat_completions_fails_its_check(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    store = io.Store(str(tmp_path / "store"))
    server.reset()
    server.probe = Reply(status=404, body={"detail": "Not Found"})
    with pytest.raises(EndpointUnusable, match=r"refused the check .*HTTP 404.*does not serve"):
        run_step(_step(_endpoint_config(server), _task_input(store, 3)), store)
    assert server.hits == 0  # no run started


def test_an_off_protocol_teacher_fails_its_runs_not_the_collection(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    """The endpoint answers, the model ignores the text protocol: every run is committed as failed
    (``AgentParsingError``), the step succeeds (exit 0), the failed share counts infrastructure only."""
    store = io.Store(str(tmp_path / "store"))
    server.reset()
    server.default = Reply(body=completion("I would rather talk about the weather."))
    result = run_step(_step(_endpoint_config(server), _task_input(store, 3)), store)
    rows = io.read_table(result.ref).to_pylist()
    assert [r["status"] for r in rows] == ["error"] * 3
    assert all(r["error"].startswith("AgentParsingError") for r in rows)
    assert result.summary["failed_share"] == 0.0 and result.summary["statuses"] == {"error": 3}


@pytest.mark.parametrize("shards", [None, 2], ids=["one-process", "sharded"])
def test_the_circuit_breaker_stops_a_collection_whose_endpoint_died(
    server: FakeLLMServer, tmp_path: Path, shards: int | None
) -> None:
    """In one process, and sharded (the Ray driver's path, its shards run here one after the other:
    each shard has its breaker, and a tripped shard trips the collection's)."""
    from coa.execution import InProcessExecutor

    executor = InProcessExecutor(shards=shards) if shards else None
    store = io.Store(str(tmp_path / "store"))
    server.reset()
    server.push(*happy_replies())  # the first run finishes, then the endpoint is down
    server.default = Reply(status=500, body={"error": {"message": "down"}})
    config = _endpoint_config(server, max_consecutive_failures=3, max_failed_share=1.0)
    step = _step(config, _task_input(store, 40))
    with pytest.raises(CollectionFailed, match=r"after 3 runs in a row .*max_consecutive_failures=3"):
        run_step(step, store, executor=executor)
    # 1 run's replies + 3 failed runs x 2 attempts (max_retries=1) per shard, not 39 runs' worth
    assert server.hits <= len(happy_replies()) + (shards or 1) * 3 * 2
    server.default = Reply()
    for _ in range(40):
        server.push(*happy_replies())
    again = run_step(step, store, executor=executor)
    assert again.summary["collect"]["resumed"] == 1  # the finished run was kept
    assert again.summary["statuses"] == {"completed": 40}


def test_an_unreachable_judge_fails_its_check_in_seconds() -> None:
    from coa.llm import EndpointConfig, LLMConfig
    from coa.scoring.judge import LLMJudge

    dead = EndpointConfig(name="judge", base_url=f"http://127.0.0.1:{closed_port()}/v1", model="j")
    t0 = time.monotonic()
    with pytest.raises(EndpointUnusable, match=r"judge endpoint 'judge' .*evaluate.judge.endpoints"):
        LLMJudge(LLMConfig(endpoints=(dead,))).check()
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        ("retrieve", r"retrieve search endpoint \(http://127\.0\.0\.1:\d+/retrieve\) .*connection error"),
        ("serper", r"serper search endpoint .* COA_TEST_NO_SUCH_KEY .* is not set"),
    ],
)
def test_a_dead_search_endpoint_fails_in_seconds_before_any_run(
    tmp_path: Path, provider: str, said: str
) -> None:
    """The search tools' endpoints are checked too (the rule-based teacher calls the real tools): a
    retrieve server that is down, a Serper key that is not set: exit 3 before the first run, not after
    every run has spent its retries; with ``record: replay`` no endpoint is called, so none is checked."""
    from coa.collect.config import CollectConfig
    from coa.tools.build import check_tools

    url = f"http://127.0.0.1:{closed_port()}"
    search = {
        "provider": provider,
        "retrieve": {"url": f"{url}/retrieve", "max_retries": 4},
        "serper": {"url": f"{url}/search", "api_key_env": "COA_TEST_NO_SUCH_KEY"},
    }
    config = CollectConfig.model_validate({"tools": {"enabled": ["web_search"], "search": search}})
    store = io.Store(str(tmp_path / "store"))
    t0 = time.monotonic()
    with pytest.raises(EndpointUnusable, match=said) as failed:
        run_step(_step(config, _task_input(store, 40)), store)
    assert time.monotonic() - t0 < 10 and failed.value.exit_code == 3
    assert f"fix collect.tools.search.{provider} " in str(failed.value)
    check_tools(config.tools.model_copy(update={"record": "replay"}), "collect.tools")  # raises nothing
