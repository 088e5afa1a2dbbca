"""The client against the fake server: replies, retries, non-retryable errors, truncation, usage."""

from __future__ import annotations

import logging

import pytest

from coa.llm import (
    ContextLengthExceeded,
    LLMConfig,
    LLMRequestError,
    LLMRetriesExhausted,
    LLMRouter,
    approx_token_count,
    estimate_prompt_tokens,
)
from coa.llm.client import LLMClient
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.llm.helpers import HI, chat_once, endpoint, run


def test_normal_reply_with_usage(fake: FakeLLMServer) -> None:
    fake.push(Reply(body=completion("hello there", model="served-model")))
    result = run(chat_once(endpoint(fake, temperature=0.3), seed=7, stop="END"))
    assert result.text == "hello there"
    assert result.finish_reason == "stop" and not result.truncated
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens) == (11, 7, 18)
    assert not result.usage_estimated and not result.cached
    assert result.attempts == 1 and result.endpoint == "fake" and result.model == "served-model"
    assert result.latency_s > 0 and result.cost_usd is None
    (req,) = fake.requests
    assert req.body == {
        "model": "fake-model",
        "messages": HI,
        "temperature": 0.3,
        "top_p": 1.0,
        "max_tokens": 10,
        "seed": 7,
        "stop": ["END"],
    }
    assert "authorization" not in req.headers  # no api_key_env: no header


def test_cost_from_prices(fake: FakeLLMServer) -> None:
    ep = endpoint(fake, price_prompt_per_1m=2.0, price_completion_per_1m=10.0)
    result = run(chat_once(ep))
    assert result.cost_usd == pytest.approx((11 * 2.0 + 7 * 10.0) / 1e6)


def test_429_honours_retry_after(fake: FakeLLMServer) -> None:
    fake.push(Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "0.2"}))
    result = run(chat_once(endpoint(fake)))
    assert result.attempts == 2 and result.text == "echo: hi"
    first, second = fake.requests
    gap = second.at - first.at
    assert 0.2 <= gap < 1.0, gap  # backoff alone would be <= 0.02 s


def test_500_then_success(fake: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    fake.push(Reply(status=500, body={"error": {"message": "boom"}}))
    with caplog.at_level(logging.WARNING, logger="coa.llm"):
        result = run(chat_once(endpoint(fake)))
    assert result.attempts == 2 and fake.hits == 2
    assert "attempt 1/4 failed: HTTP 500: boom" in caplog.text


def test_timeout_then_success(fake: FakeLLMServer) -> None:
    fake.push(Reply(delay=0.6))
    result = run(chat_once(endpoint(fake, timeout_s=0.2)))
    assert result.attempts == 2 and result.text == "echo: hi"
    assert fake.hits == 2


def test_malformed_json_then_success(fake: FakeLLMServer) -> None:
    fake.push(Reply(raw='{"choices": [ {"message": '), Reply(body={"unexpected": True}))
    result = run(chat_once(endpoint(fake)))
    assert result.attempts == 3 and result.text == "echo: hi"


def test_connection_error_is_retried_then_exhausted() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from coa.llm import EndpointConfig

    ep = EndpointConfig(
        name="down", base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_base_s=0.01
    )
    with pytest.raises(LLMRetriesExhausted, match="connection error"):
        run(chat_once(ep))


def test_retries_exhausted_is_a_clear_error(fake: FakeLLMServer) -> None:
    fake.push(*[Reply(status=503, body={"error": {"message": "overloaded"}}) for _ in range(3)])
    with pytest.raises(LLMRetriesExhausted) as info:
        run(chat_once(endpoint(fake, max_retries=2)))
    assert fake.hits == 3
    err = info.value
    assert err.attempts == 3 and err.endpoint == "fake"
    assert "all 3 attempt(s) failed" in str(err) and "HTTP 503: overloaded" in str(err)
    assert "fake-model" in str(err) and fake.url in str(err)


@pytest.mark.parametrize(
    "error",
    [
        {
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4990 in the messages, 10 in the completion).",
            "type": "BadRequestError",
        },
        {"message": "Input too long.", "code": "context_length_exceeded"},
    ],
    ids=["vllm-message", "openai-code"],
)
def test_context_length_error_is_not_retried(fake: FakeLLMServer, error: dict[str, str]) -> None:
    fake.push(Reply(status=400, body={"error": error}))
    with pytest.raises(ContextLengthExceeded) as info:
        run(chat_once(endpoint(fake, max_retries=5)))
    assert fake.hits == 1
    assert info.value.status == 400 and info.value.endpoint == "fake"
    assert "context length" in str(info.value)


def test_other_4xx_raise_request_error_without_retry(fake: FakeLLMServer) -> None:
    fake.push(
        Reply(status=404, body={"error": {"message": "model 'x' not found", "code": "model_not_found"}})
    )
    with pytest.raises(LLMRequestError) as info:
        run(chat_once(endpoint(fake, max_retries=5)))
    assert not isinstance(info.value, ContextLengthExceeded)
    assert fake.hits == 1 and info.value.status == 404
    assert "HTTP 404: model 'x' not found (code: model_not_found)" in str(info.value)


def test_truncated_output_is_flagged_not_retried(fake: FakeLLMServer) -> None:
    fake.push(Reply(body=completion("a partial ans", finish_reason="length")))
    result = run(chat_once(endpoint(fake, max_retries=5)))
    assert result.truncated and result.finish_reason == "length" and result.text == "a partial ans"
    assert fake.hits == 1 and result.attempts == 1


def test_missing_usage_is_estimated(fake: FakeLLMServer) -> None:
    text = "forty-two is the answer to that"
    fake.push(Reply(body=completion(text, usage=None)))
    result = run(chat_once(endpoint(fake)))
    assert result.usage_estimated
    assert result.prompt_tokens == estimate_prompt_tokens(HI, approx_token_count)
    assert result.completion_tokens == approx_token_count(text) == 8


def test_token_counter_hook(fake: FakeLLMServer) -> None:
    fake.push(Reply(body=completion("one two three", usage=None)))

    async def go() -> int:
        async with LLMClient(endpoint(fake), token_counter=lambda t: len(t.split())) as client:
            return (await client.chat(HI)).completion_tokens

    assert run(go()) == 3


def test_router_roles_share_an_endpoint(fake: FakeLLMServer) -> None:
    ep = endpoint(fake)
    other = endpoint(fake, name="other", temperature=0.0)
    config = LLMConfig(endpoints=(ep, other), judge="other", cache=False)

    async def go() -> dict[str, object]:
        async with LLMRouter(config) as llm:
            assert llm.client("teacher") is llm.client("summariser") is llm.client("fake")
            await llm.chat("teacher", HI)
            await llm.chat("judge", HI)
            return llm.summary()

    summary = run(go())
    assert [r.body["temperature"] for r in fake.requests] == [0.7, 0.0]
    assert summary["endpoints"]["fake"]["requests"] == 1  # type: ignore[index]
    assert summary["budget"]["spent_tokens"] == 36  # type: ignore[index]
