"""The client at many calls in flight: the bound holds, connections are pooled and reused, cache
writes happen behind the call and are never lost on close, the environment is read once."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from coa.llm import LLMClient, LLMRetriesExhausted, ResponseCache, Scrubber
from coa.llm.client import env_proxy
from tests.llm.fake_server import FakeLLMServer, Reply
from tests.llm.helpers import HI, chat_once, endpoint, run


def _calls(client: LLMClient, n: int) -> Any:
    return asyncio.gather(*(client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(n)))


@pytest.mark.parametrize("bound", [64, 256])
def test_bound_holds_and_is_reached_with_256_calls_at_once(fake: FakeLLMServer, bound: int) -> None:
    """The semaphore caps what is in flight; the pool is sized from it, so the cap is also reached."""
    fake.default = Reply(delay=0.2)

    async def go() -> None:
        async with LLMClient(endpoint(fake, max_concurrency=bound)) as client:
            await _calls(client, 256)

    run(go())
    assert fake.hits == 256
    assert fake.max_in_flight == bound


def test_connections_are_kept_alive_and_reused(fake: FakeLLMServer) -> None:
    fake.default = Reply(delay=0.02)

    async def go() -> None:
        async with LLMClient(endpoint(fake, max_concurrency=8)) as client:
            for _ in range(3):  # three waves of 16 calls through 8 slots
                await _calls(client, 16)

    run(go())
    peers = {r.peer for r in fake.requests}
    assert fake.hits == 48 and all(peers)
    assert len(peers) <= 8  # one connection per slot at most, reused across calls and waves


def test_cache_entry_is_readable_before_its_file_is_written(
    fake: FakeLLMServer, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ResponseCache()
    release = threading.Event()
    write_batch = cache._write_batch

    def slow_write(batch: Mapping[str, Mapping[str, Any]]) -> None:
        release.wait(5)
        write_batch(batch)

    monkeypatch.setattr(cache, "_write_batch", slow_write)
    files = lambda: sorted(p for p in storage_root.rglob("*.json"))  # noqa: E731

    async def go() -> tuple[bool, bool, list[Path]]:
        async with LLMClient(endpoint(fake), cache=cache) as client:
            first = await client.chat(HI)
            second = await client.chat(HI)  # the write is still pending: served from memory
            pending = files()
            release.set()
        return first.cached, second.cached, pending

    first_cached, second_cached, pending = run(go())
    assert (first_cached, second_cached) == (False, True) and fake.hits == 1
    assert pending == []  # the call did not wait for the write
    (entry,) = files()  # ...and closing the client waited for it
    assert json.loads(entry.read_text())["result"]["text"] == "echo: hi"


def test_one_cache_serves_two_event_loops(fake: FakeLLMServer, storage_root: Path) -> None:
    """A resumed run in a new loop with the same cache object: the writer follows the loop."""
    cache = ResponseCache()

    async def once() -> bool:
        async with LLMClient(endpoint(fake), cache=cache) as client:
            results = await asyncio.gather(client.chat(HI, seed=1), client.chat(HI, seed=2))
        return any(r.cached for r in results)

    assert run(once()) is False
    assert run(once()) is True and fake.hits == 2
    assert len(list(storage_root.rglob("*.json"))) == 2


def test_failed_background_write_is_logged_and_not_retried(
    fake: FakeLLMServer, storage_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = ResponseCache()
    attempts: list[str] = []

    def broken_mv(path1: str, path2: str, **_: Any) -> None:
        attempts.append(path2)
        raise OSError("disk full")

    monkeypatch.setattr(cache._fs, "mv", broken_mv)

    async def go() -> str:
        async with LLMClient(endpoint(fake), cache=cache) as client:
            return (await client.chat(HI)).text

    with caplog.at_level(logging.WARNING, logger="coa.llm.cache"):
        assert run(go()) == "echo: hi"
    assert len(attempts) == 1 and "disk full" in caplog.text
    assert not [p for p in storage_root.rglob("*") if p.is_file()]  # no entry, no temp file left


def test_scrubber_reads_the_environment_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COA_TEST_SCALE_TOKEN", "first-secret-value")
    cached = Scrubber(["own-key-1234"], env_refresh_s=3600)
    fresh = Scrubber(env_refresh_s=0)
    assert cached.text("first-secret-value own-key-1234") == "*** ***"
    monkeypatch.setenv("COA_TEST_SCALE_TOKEN", "second-secret-value")
    assert fresh.text("second-secret-value") == "***"  # re-read at once with a zero interval
    assert cached.text("second-secret-value") == "second-secret-value"  # not before its interval
    assert cached.text("own-key-1234") == "***"  # its own keys always


def test_env_proxy_honours_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://api.example.com/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://plain.internal:3128")
    assert env_proxy("https://api.example.com/v1/chat/completions") == "http://proxy.internal:3128"
    assert env_proxy("http://api.example.com/v1/chat/completions") == "http://plain.internal:3128"
    monkeypatch.setenv("NO_PROXY", "api.example.com,127.0.0.1")
    assert env_proxy("https://api.example.com/v1/chat/completions") is None


def test_client_under_a_proxy_setting_reaches_a_no_proxy_host(
    fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    async def go() -> str:
        async with LLMClient(endpoint(fake)) as client:
            return (await client.chat(HI)).text

    assert run(go()) == "echo: hi" and fake.hits == 1


def test_client_sends_through_the_proxy_the_environment_names(
    fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("no_proxy", "NO_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there

    with pytest.raises(LLMRetriesExhausted, match="connection error"):
        run(chat_once(endpoint(fake, max_retries=0)))
    assert fake.hits == 0  # the request went to the proxy, not straight to the server


def test_credentials_in_the_url_never_reach_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp's connection errors name host and port only; ours use the URL without user info."""
    import socket

    from coa.llm import EndpointConfig

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = "pw-in-url-93f1c2"
    ep = EndpointConfig(
        name="down",
        base_url=f"http://user:{password}@127.0.0.1:{port}/v1",
        model="m",
        max_retries=1,
        backoff_base_s=0.01,
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(LLMRetriesExhausted) as info:
        run(chat_once(ep))
    assert f"127.0.0.1:{port}" in str(info.value)
    assert password not in str(info.value) + repr(info.value) and password not in caplog.text


def test_proxy_credentials_go_in_proxy_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``HTTP_PROXY`` with user info: the request goes to the proxy in absolute form, with the
    user info as basic auth in ``Proxy-Authorization``."""
    import base64
    import re

    from coa.llm import EndpointConfig
    from tests.llm.fake_server import completion

    heads: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        match = re.search(rb"(?i)content-length: *(\d+)", head)
        await reader.readexactly(int(match.group(1)) if match else 0)
        heads.append(head.decode("latin-1"))
        body = json.dumps(completion("via proxy")).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    for name in ("no_proxy", "NO_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def go() -> str:
        server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        monkeypatch.setenv("HTTP_PROXY", f"http://puser:pw%2Fproxy-5150@127.0.0.1:{port}")
        ep = EndpointConfig(name="p", base_url="http://llm.invalid/v1", model="m", max_retries=0)
        async with server, LLMClient(ep) as client:
            return (await client.chat(HI)).text

    assert run(go()) == "via proxy"
    (head,) = heads
    assert head.startswith("POST http://llm.invalid/v1/chat/completions HTTP/1.1")
    token = base64.b64encode(b"puser:pw/proxy-5150").decode()
    assert f"proxy-authorization: basic {token}".lower() in head.lower()
