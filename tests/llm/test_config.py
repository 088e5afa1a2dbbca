"""LLM config validation, role resolution, and the small pure helpers (Retry-After, tokens, errors)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from coa.config import ConfigError, build_config
from coa.llm import (
    EndpointConfig,
    LLMConfig,
    approx_token_count,
    estimate_prompt_tokens,
    hf_token_counter,
    is_context_length_error,
    parse_retry_after,
)

BASE = {"name": "e", "base_url": "http://h:8000/v1", "model": "m"}


def ep(**kw: Any) -> EndpointConfig:
    return EndpointConfig(**{**BASE, **kw})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"base_url": None}, "exactly one of base_url / base_url_env"),
        ({"base_url_env": "X_URL"}, "exactly one of base_url / base_url_env"),
        ({"base_url": "h:8000"}, "http:// or https://"),
        ({"api_key_env": "sk-live-abc123"}, "should match pattern"),  # a key pasted where its NAME goes
        ({"api_key_env": "K", "api_key_block": "b"}, "at most one of api_key_env / api_key_block"),
        ({"backoff_base_s": 5, "backoff_max_s": 1}, "backoff_max_s must be >= backoff_base_s"),
        ({"max_concurrency": 0}, "greater than or equal to 1"),
        ({"api_key": "sk-x"}, "Extra inputs are not permitted"),
    ],
)
def test_endpoint_validation(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ep(**overrides)


def test_base_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = EndpointConfig(name="e", base_url_env="COA_TEST_LLM_URL", model="m")
    monkeypatch.delenv("COA_TEST_LLM_URL", raising=False)
    with pytest.raises(ConfigError, match="COA_TEST_LLM_URL"):
        cfg.resolved_base_url()
    monkeypatch.setenv("COA_TEST_LLM_URL", "http://gpu-1:8000/v1/")
    assert cfg.resolved_base_url() == "http://gpu-1:8000/v1"
    assert ep(base_url="https://api.example.com/v1/").resolved_base_url() == "https://api.example.com/v1"


def test_cost() -> None:
    assert ep().cost_usd(10, 10) is None
    assert ep(price_prompt_per_1m=1, price_completion_per_1m=3).cost_usd(1_000_000, 500_000) == 2.5


def test_roles_default_and_share() -> None:
    a, b = ep(name="a"), ep(name="b")
    cfg = LLMConfig(endpoints=(a, b), judge="b")
    assert cfg.endpoint("teacher") is a and cfg.endpoint("summariser") is a and cfg.endpoint("judge") is b
    assert cfg.endpoint("b") is b
    cfg = LLMConfig(endpoints=(a, b), teacher="b")
    assert cfg.endpoint_name("judge") == "b"
    with pytest.raises(ConfigError, match="no LLM endpoints configured"):
        LLMConfig().endpoint("teacher")
    with pytest.raises(ConfigError, match="no LLM endpoint named 'zz'"):
        cfg.endpoint("zz")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"endpoints": [BASE, BASE]}, "duplicate endpoint names: e"),
        ({"endpoints": [BASE], "judge": "nope"}, "judge: no endpoint named 'nope'"),
        ({"endpoints": [BASE], "budget_usd": 5}, "budget_usd needs price"),
        ({"endpoints": [BASE], "budgt_tokens": 5}, "did you mean 'budget_tokens'"),
        ({"endpoints": [{**BASE, "temprature": 0}]}, "did you mean 'temperature'"),
    ],
)
def test_llm_config_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(data, LLMConfig)


def test_llm_config_from_plain_data() -> None:
    priced = {**BASE, "price_prompt_per_1m": 0, "price_completion_per_1m": 0}
    cfg = build_config({"endpoints": [priced], "budget_usd": 1.5, "budget_tokens": 100}, LLMConfig)
    assert cfg.budget_usd == 1.5 and cfg.cache is True and cfg.endpoints[0].max_retries == 6


def test_parse_retry_after() -> None:
    now = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.2"}) == 0.2
    assert parse_retry_after({"Retry-After": "Tue, 01 Jan 2030 12:00:05 GMT"}, now=now) == 5.0
    assert parse_retry_after({"Retry-After": "Tue, 01 Jan 2030 11:00:00 GMT"}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-1"}) is None
    assert parse_retry_after({}) is None


def test_context_length_markers() -> None:
    assert is_context_length_error('{"error": {"code": "context_length_exceeded"}}')
    assert is_context_length_error("This model's maximum context length is 8192 tokens")
    assert not is_context_length_error("Invalid value for 'temperature'")


def test_token_counting() -> None:
    assert approx_token_count("") == 0
    assert approx_token_count("abcd") == 1 and approx_token_count("abcde") == 2
    assert approx_token_count("日本") == 2  # 6 UTF-8 bytes
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "abcd"},
        {"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
    ]
    # priming 3, then per message 4 + content (+ tool_calls as text: 13 bytes -> 4)
    assert estimate_prompt_tokens(messages, approx_token_count) == 3 + (4 + 1) + (4 + 2) + (4 + 0 + 4)


def test_hf_token_counter_accepts_a_loaded_tokenizer() -> None:
    class Tok:
        calls = 0

        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            Tok.calls += 1
            assert add_special_tokens is False
            return list(range(len(text.split())))

    count = hf_token_counter(Tok())
    assert count("a b c") == 3 and count("") == 0 and Tok.calls == 1
