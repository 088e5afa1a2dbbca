"""Shared helpers of the LLM-layer tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from coa.llm import Budget, ChatResult, EndpointConfig, LLMClient, LLMConfig, ResponseCache
from tests.llm.fake_server import FakeLLMServer

T = TypeVar("T")

HI = [{"role": "user", "content": "hi"}]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def endpoint(fake: FakeLLMServer, **overrides: Any) -> EndpointConfig:
    """An endpoint on the fake server with fast retries (tests override what they exercise)."""
    values: dict[str, Any] = {
        "name": "fake",
        "base_url": fake.url,
        "model": "fake-model",
        "max_retries": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.02,
        "timeout_s": 5.0,
        "max_tokens": 10,
    }
    values.update(overrides)
    return EndpointConfig(**values)


async def chat_once(
    ep: EndpointConfig,
    messages: Sequence[dict[str, Any]] = HI,
    *,
    cache: ResponseCache | None = None,
    budget: Budget | None = None,
    **kwargs: Any,
) -> ChatResult:
    async with LLMClient(ep, cache=cache, budget=budget) as client:
        return await client.chat(messages, **kwargs)


def judge_config(server: FakeLLMServer, cache: Path) -> LLMConfig:
    """An LLM judge on the fake server (one fast retry), caching its verdicts under ``cache``."""
    endpoint = EndpointConfig(
        name="judge", base_url=server.url, model="judge-model", max_retries=1, backoff_base_s=0.01,
        backoff_max_s=0.02, timeout_s=5,
    )  # fmt: skip
    return LLMConfig(endpoints=(endpoint,), cache_root=str(cache))
