"""Concurrency, request and token rate limits, and the run-wide budget."""

from __future__ import annotations

import asyncio

import pytest

from coa.llm import (
    AsyncTokenBucket,
    Budget,
    BudgetExhausted,
    LLMClient,
    LLMConfig,
    LLMRouter,
    ResponseCache,
    approx_token_count,
    estimate_prompt_tokens,
)
from tests.llm.fake_server import DEFAULT_USAGE, FakeLLMServer, Reply
from tests.llm.helpers import HI, endpoint, run


def test_concurrency_limit_is_respected(fake: FakeLLMServer) -> None:
    fake.default = Reply(batch=3)  # each request waits for its batch of three: they overlap however loaded

    async def go() -> None:
        async with LLMClient(endpoint(fake, max_concurrency=3)) as client:
            await asyncio.gather(*(client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(9)))

    run(go())
    assert fake.hits == 9
    assert fake.max_in_flight == 3


def test_requests_per_minute_spaces_requests(fake: FakeLLMServer) -> None:
    async def go() -> None:
        async with LLMClient(endpoint(fake, requests_per_minute=600, max_concurrency=10)) as client:
            await asyncio.gather(*(client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(5)))

    run(go())
    times = sorted(r.at for r in fake.requests)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) == 4
    assert min(gaps) >= 0.085, gaps  # 600/min = one request every 0.1 s (burst 0)
    assert times[-1] - times[0] < 0.8


def test_tokens_per_minute_reconciles_with_usage(fake: FakeLLMServer) -> None:
    # 6000 tokens/min = 100/s. Each call reserves its estimate (prompt + max_tokens = 8 + 50), then is
    # reconciled to the reported 18 tokens, so the next call waits ~0.18 s, not ~0.58 s.
    async def go() -> None:
        async with LLMClient(endpoint(fake, tokens_per_minute=6000, max_tokens=50)) as client:
            await client.chat(HI)
            await client.chat(HI)

    assert estimate_prompt_tokens(HI, approx_token_count) == 8
    run(go())
    first, second = fake.requests
    assert 0.15 <= second.at - first.at < 0.45, second.at - first.at


def test_budget_stops_before_the_call_that_would_exceed_it(fake: FakeLLMServer) -> None:
    # each call reserves 8 (prompt estimate) + 10 (max_tokens) = 18 and spends 18 (reported usage)
    budget = Budget(max_tokens=60)
    cache = ResponseCache()

    async def go() -> list[str]:
        async with LLMClient(endpoint(fake), budget=budget, cache=cache) as client:
            for i in range(3):
                await client.chat(HI, sample_id=i)
            with pytest.raises(BudgetExhausted, match="budget_tokens=60 with 54 spent"):
                await client.chat(HI, sample_id=3)
            replay = await client.chat(HI, sample_id=0)  # cache replays are free, even now
            assert replay.cached
            return [replay.text]

    run(go())
    assert fake.hits == 3
    assert budget.spent_tokens == 54 and budget.reserved_tokens == 0 and budget.calls == 3


def test_usd_budget_via_router(fake: FakeLLMServer) -> None:
    # price: $1 per 1M prompt and completion tokens; reservation 18 tokens = $0.000018, spend $0.000018
    ep = endpoint(fake, price_prompt_per_1m=1.0, price_completion_per_1m=1.0)
    config = LLMConfig(endpoints=(ep,), budget_usd=0.00004, cache=False)

    async def go() -> int:
        calls = 0
        async with LLMRouter(config) as llm:
            try:
                while calls < 10:  # bounded: the budget must stop it at 2
                    await llm.chat("teacher", HI)
                    calls += 1
            except BudgetExhausted as e:
                assert "budget_usd=4e-05" in str(e)
            assert llm.budget.spent_usd == pytest.approx(2 * 18 / 1e6)
        return calls

    assert run(go()) == 2 and fake.hits == 2


def test_budget_counts_calls_in_flight(fake: FakeLLMServer) -> None:
    fake.default = Reply(delay=0.1)
    budget = Budget(max_tokens=40)  # two reservations of 18 fit, a third does not while they run

    async def go() -> list[object]:
        async with LLMClient(endpoint(fake), budget=budget) as client:
            calls = [client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(3)]
            return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = run(go())
    assert sum(isinstance(o, BudgetExhausted) for o in outcomes) == 1
    per_call = DEFAULT_USAGE["prompt_tokens"] + DEFAULT_USAGE["completion_tokens"]
    assert fake.hits == 2 and budget.spent_tokens == 2 * per_call


def test_failed_call_releases_its_reservation(fake: FakeLLMServer) -> None:
    fake.push(Reply(status=401, body={"error": {"message": "no"}}))
    budget = Budget(max_tokens=100)

    async def go() -> None:
        async with LLMClient(endpoint(fake), budget=budget) as client:
            with pytest.raises(Exception, match="HTTP 401"):
                await client.chat(HI)

    run(go())
    assert budget.reserved_tokens == 0 and budget.spent_tokens == 0


def test_budget_unit() -> None:
    b = Budget(max_tokens=100, max_usd=1.0)
    r1 = b.reserve(60, 0.5)
    with pytest.raises(BudgetExhausted):
        b.reserve(50, 0.1)
    with pytest.raises(BudgetExhausted, match="USD budget"):
        b.reserve(10, 0.6)
    b.settle(r1, 20, 0.1)
    b.release(b.reserve(80, 0.9))
    assert b.summary()["remaining_tokens"] == 80 and b.summary()["calls"] == 1
    assert Budget().reserve(10**12, 10**6)  # no limits


def test_token_bucket_waits_and_goes_into_debt() -> None:
    async def go() -> tuple[float, float, float]:
        bucket = AsyncTokenBucket(rate_per_s=20.0, capacity=2.0)
        quick = await bucket.acquire(2)  # the full burst is free
        spaced = await bucket.acquire(1)  # then one per 0.05 s
        big = await bucket.acquire(5)  # larger than capacity: waits for a full bucket, leaves debt
        return quick, spaced, big

    quick, spaced, big = run(go())
    assert quick < 0.01 and 0.04 <= spaced < 0.3 and 0.04 <= big < 0.3


def test_token_bucket_validates() -> None:
    with pytest.raises(ValueError):
        AsyncTokenBucket(0, 1)
    assert AsyncTokenBucket.per_minute(600).capacity == 1.0
    assert AsyncTokenBucket.per_minute(600, burst_s=2).capacity == 20.0
