"""The response cache: replay without a request, misses on any change that matters, atomic files, S3."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coa.llm import Budget, LLMClient, LLMConfig, LLMRouter, ResponseCache, cache_key
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.llm.helpers import HI, chat_once, endpoint, run


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / "llm-cache").rglob("*") if p.is_file())


def test_second_identical_call_replays_from_cache(fake: FakeLLMServer, storage_root: Path) -> None:
    ep = endpoint(fake)
    budget = Budget(max_tokens=1000)
    first = run(chat_once(ep, cache=ResponseCache(), budget=budget, seed=1))
    assert not first.cached and fake.hits == 1 and budget.spent_tokens == 18

    # a "resumed run": new cache object, new client, same storage root
    second = run(chat_once(ep, cache=ResponseCache(), budget=budget, seed=1))
    assert fake.hits == 1  # nothing sent
    assert second.cached and second.attempts == 0
    assert budget.spent_tokens == 18  # replays are free
    same = ("text", "finish_reason", "prompt_tokens", "completion_tokens", "model", "endpoint")
    assert {k: getattr(second, k) for k in same} == {k: getattr(first, k) for k in same}

    (entry,) = _entries(storage_root)
    key = entry.stem
    assert entry.parent.name == key[:2] and entry.parent.parent == storage_root / "llm-cache"
    stored = json.loads(entry.read_text())
    assert stored["key"] == key and stored["request"]["messages"] == HI
    assert stored["request"]["params"]["seed"] == 1 and stored["result"]["text"] == "echo: hi"


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.1},
        {"top_p": 0.5},
        {"max_tokens": 11},
        {"seed": 2},
        {"stop": ["\n"]},
        {"sample_id": 1},
        {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
        {"messages": [{"role": "user", "content": "hi!"}]},
    ],
    ids=lambda c: next(iter(c)),
)
def test_any_change_in_the_request_misses(fake: FakeLLMServer, change: dict[str, Any]) -> None:
    ep = endpoint(fake)
    run(chat_once(ep, cache=ResponseCache()))
    messages = change.pop("messages", HI)
    result = run(chat_once(ep, messages, cache=ResponseCache(), **change))
    assert not result.cached and fake.hits == 2


def test_other_endpoint_or_model_misses(fake: FakeLLMServer) -> None:
    run(chat_once(endpoint(fake), cache=ResponseCache()))
    assert not run(chat_once(endpoint(fake, model="other-model"), cache=ResponseCache())).cached
    assert not run(chat_once(endpoint(fake, name="fake2"), cache=ResponseCache())).cached
    assert fake.hits == 3


def test_use_cache_false_and_disabled_cache(fake: FakeLLMServer, storage_root: Path) -> None:
    ep = endpoint(fake)
    run(chat_once(ep, cache=ResponseCache()))
    assert not run(chat_once(ep, cache=ResponseCache(), use_cache=False)).cached

    async def via_router() -> bool:
        async with LLMRouter(LLMConfig(endpoints=(endpoint(fake, name="nocache"),), cache=False)) as llm:
            assert llm.cache is None
            await llm.chat("teacher", HI)
            return (await llm.chat("teacher", HI)).cached

    assert not run(via_router())
    assert fake.hits == 4 and len(_entries(storage_root)) == 1


def test_cache_root_from_config(fake: FakeLLMServer, tmp_path: Path) -> None:
    config = LLMConfig(endpoints=(endpoint(fake),), cache_root=str(tmp_path / "elsewhere"))

    async def go() -> None:
        async with LLMRouter(config) as llm:
            await llm.chat("teacher", HI)

    run(go())
    assert len(list((tmp_path / "elsewhere").rglob("*.json"))) == 1


def test_errors_are_not_cached_truncations_are(fake: FakeLLMServer, storage_root: Path) -> None:
    fake.push(Reply(status=400, body={"error": {"message": "bad"}}))
    with pytest.raises(Exception, match="HTTP 400"):
        run(chat_once(endpoint(fake), cache=ResponseCache()))
    assert _entries(storage_root) == []
    fake.push(Reply(body=completion("cut", finish_reason="length")))
    run(chat_once(endpoint(fake), cache=ResponseCache()))
    replay = run(chat_once(endpoint(fake), cache=ResponseCache()))
    assert replay.cached and replay.truncated and fake.hits == 2


def test_corrupt_entry_is_a_miss_and_is_rewritten(fake: FakeLLMServer, storage_root: Path) -> None:
    run(chat_once(endpoint(fake), cache=ResponseCache()))
    (entry,) = _entries(storage_root)
    entry.write_text('{"key": "trunc')
    assert not run(chat_once(endpoint(fake), cache=ResponseCache())).cached
    assert json.loads(entry.read_text())["key"] == entry.stem
    assert run(chat_once(endpoint(fake), cache=ResponseCache())).cached and fake.hits == 2


def test_write_is_atomic_and_failure_does_not_lose_the_reply(
    fake: FakeLLMServer, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ResponseCache()
    uri = cache.put("ab" * 32, {"q": 1}, {"text": "x"})
    assert uri.endswith("/llm-cache/ab/" + "ab" * 32 + ".json")
    assert [p.name for p in _entries(storage_root)] == ["ab" * 32 + ".json"]  # no temp file left
    assert cache.get("ab" * 32) == {"text": "x"} and cache.get("cd" * 32) is None

    def broken_mv(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cache._fs, "mv", broken_mv)
    result = run(chat_once(endpoint(fake), cache=cache))
    assert result.text == "echo: hi"  # the paid reply is still returned
    assert [p.name for p in _entries(storage_root)] == ["ab" * 32 + ".json"]  # temp file cleaned up
    with pytest.raises(ValueError):
        cache.get("../../etc/passwd")


def test_cache_key_is_canonical() -> None:
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 1.5})
    assert len(cache_key({})) == 64


# -- s3:// -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_cache_on_s3(fake: FakeLLMServer, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("COA_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("COA_STORAGE_ROOT", "s3://llm-cache-test/run")
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket="llm-cache-test"
    )
    s3fs.S3FileSystem.clear_instance_cache()

    first = run(chat_once(endpoint(fake), cache=ResponseCache()))
    second = run(chat_once(endpoint(fake), cache=ResponseCache()))
    assert not first.cached and second.cached and fake.hits == 1
    keys = [
        o["Key"]
        for o in boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").list_objects_v2(
            Bucket="llm-cache-test"
        )["Contents"]
    ]
    assert len(keys) == 1 and keys[0].startswith("run/llm-cache/") and keys[0].endswith(".json")


def test_client_uses_cache_before_needing_a_key(fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay needs no API key: an offline rerun from the cache works without credentials."""
    monkeypatch.setenv("COA_TEST_REPLAY_API_KEY", "sk-replay-000000")
    ep = endpoint(fake, api_key_env="COA_TEST_REPLAY_API_KEY")
    run(chat_once(ep, cache=ResponseCache()))
    monkeypatch.delenv("COA_TEST_REPLAY_API_KEY")

    async def go() -> bool:
        async with LLMClient(ep, cache=ResponseCache()) as client:
            return (await client.chat(HI)).cached

    assert run(go()) and fake.hits == 1
