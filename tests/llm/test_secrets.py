"""API keys reach the server's Authorization header and nothing else: no cache, log, error, result."""

from __future__ import annotations

import logging
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from coa.config import ConfigError
from coa.llm import (
    EndpointConfig,
    LLMClient,
    LLMRequestError,
    LLMRetriesExhausted,
    ResponseCache,
    Scrubber,
    resolve_api_key,
    set_secret_block_reader,
)
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.llm.helpers import chat_once, endpoint, run

KEY = "sk-test-7f3a9c1e5b2d4f60a8e7"


def _all_text(exc: BaseException) -> str:
    return str(exc) + repr(exc) + "".join(traceback.format_exception(exc))


# One name that coa.settings.scrub recognises as secret, one it does not (only the client's own
# Scrubber knows that value is the key).
@pytest.mark.parametrize("env_name", ["COA_TEST_LLM_API_KEY", "COA_TEST_LLM_AUTH"])
def test_api_key_never_leaks(
    fake: FakeLLMServer,
    storage_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    env_name: str,
) -> None:
    monkeypatch.setenv(env_name, KEY)
    ep = endpoint(fake, api_key_env=env_name, max_retries=1)
    leak = f"your key is {KEY}"
    fake.push(
        # a retried 500 whose body echoes the key: logged as a warning
        Reply(status=500, body={"error": {"message": leak}}),
        # the reply echoes the key, and so does the prompt: both go to the cache
        Reply(body=completion(leak)),
        # a 401 echoing the key: raised as LLMRequestError
        Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {KEY}"}}),
        # two 502s echoing the key: LLMRetriesExhausted
        Reply(status=502, raw=leak),
        Reply(status=502, raw=leak),
    )
    errors: list[BaseException] = []

    async def go() -> Any:
        async with LLMClient(ep, cache=ResponseCache()) as client:
            result = await client.chat([{"role": "user", "content": f"repeat {KEY}"}])
            for i in (1, 2):
                try:
                    await client.chat([{"role": "user", "content": "again"}], sample_id=i)
                except (LLMRequestError, LLMRetriesExhausted) as e:
                    errors.append(e)
            return result

    with caplog.at_level(logging.DEBUG):
        result = run(go())

    assert fake.hits == 5
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in fake.requests)
    assert [type(e) for e in errors] == [LLMRequestError, LLMRetriesExhausted]
    assert "***" in str(errors[0]) and "***" in str(errors[1])
    for e in errors:
        assert KEY not in _all_text(e)
    assert "retrying" in caplog.text and KEY not in caplog.text
    assert result.text == "your key is ***" and KEY not in result.model_dump_json()
    files = [p for p in storage_root.rglob("*") if p.is_file()]
    assert files, "the successful call should be cached"
    for path in files:
        assert KEY not in path.read_text() and KEY not in str(path)


def test_missing_key_env_names_the_variable(fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COA_TEST_ABSENT_KEY", raising=False)
    with pytest.raises(ConfigError, match="COA_TEST_ABSENT_KEY"):
        run(chat_once(endpoint(fake, api_key_env="COA_TEST_ABSENT_KEY")))
    assert fake.hits == 0


@pytest.fixture
def block_reader() -> Any:
    """Restores whichever secret-block reader was installed before the test."""
    previous = set_secret_block_reader(None)
    yield
    set_secret_block_reader(previous)


def test_key_from_prefect_secret_block(
    fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, block_reader: None
) -> None:
    """The Prefect layer (tasks.secret_blocks) installs the Secret-block lookup; the key reaches the
    Authorization header."""
    from prefect.blocks import system

    import tasks.secret_blocks

    set_secret_block_reader(tasks.secret_blocks.read_secret_block)  # what importing tasks did once
    loaded: list[str] = []

    class FakeSecret:
        def get(self) -> str:
            return KEY

    async def aload(name: str, *args: Any, **kwargs: Any) -> FakeSecret:
        loaded.append(name)
        return FakeSecret()

    monkeypatch.setattr(system.Secret, "aload", aload)
    ep = endpoint(fake, api_key_block="llm-teacher-key")
    run(chat_once(ep))
    assert loaded == ["llm-teacher-key"]
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_failed_block_load_is_a_clean_config_error(
    monkeypatch: pytest.MonkeyPatch, block_reader: None
) -> None:
    from prefect.blocks import system

    import tasks.secret_blocks

    set_secret_block_reader(tasks.secret_blocks.read_secret_block)

    async def aload(name: str, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"Unable to find block document named {name}, key {KEY}")

    monkeypatch.setenv("COA_TEST_LLM_API_KEY", KEY)  # a secret-looking env value: scrubbed from the error
    monkeypatch.setattr(system.Secret, "aload", aload)
    cfg = EndpointConfig(name="x", base_url="http://127.0.0.1:9/v1", model="m", api_key_block="missing")
    with pytest.raises(ConfigError, match="cannot load Prefect Secret block 'missing'") as caught:
        run(resolve_api_key(cfg))
    assert KEY not in _all_text(caught.value)


@pytest.mark.parametrize("value", ["", "   ", None, 42])
def test_block_without_a_key_is_a_config_error(value: Any, block_reader: None) -> None:
    async def reader(name: str) -> Any:
        return value

    set_secret_block_reader(reader)
    cfg = EndpointConfig(name="x", base_url="http://127.0.0.1:9/v1", model="m", api_key_block="empty")
    with pytest.raises(ConfigError, match="'empty' does not hold a non-empty string"):
        run(resolve_api_key(cfg))


def test_block_without_the_prefect_layer_names_the_fix(fake: FakeLLMServer, block_reader: None) -> None:
    """coa alone reads environment variables only: a block name fails before any request, with the fix."""
    with pytest.raises(ConfigError, match="api_key_block 'llm-teacher-key'.*api_key_env"):
        run(chat_once(endpoint(fake, api_key_block="llm-teacher-key")))
    assert fake.hits == 0


def test_coa_llm_does_not_import_prefect() -> None:
    code = "import sys, coa.llm; assert not [m for m in sys.modules if m.split('.')[0] == 'prefect']"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_importing_the_prefect_layer_installs_the_block_reader() -> None:
    code = (
        "import coa.llm.secrets as s; assert s.secret_block_reader() is None; "
        "import tasks, tasks.secret_blocks as b; "
        "assert s.secret_block_reader() is b.read_secret_block"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_scrubber_masks_trees_not_keys() -> None:
    s = Scrubber([KEY, None, ""])
    tree = {"max_tokens": 5, "content": f"a {KEY} b", "list": [KEY, 3]}
    assert s.tree(tree) == {"max_tokens": 5, "content": "a *** b", "list": ["***", 3]}
