"""The real policies: a completions server speaking token ids, and HF generate on a tiny random Qwen2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coa.llm.config import EndpointConfig
from coa.rollout import Codec, EpisodeSpec, RolloutConfig, Sampling, rollout
from coa.rollout.policies.endpoint import EndpointPolicy
from coa.rollout.policies.hf import HFPolicy

from .fake_completions import FakeCompletionsServer, TurnScript, fake_logprob
from .helpers import ANSWER, CHATML, SpyToolBox, code_turn

CONFIG = RolloutConfig(max_turns=4, max_new_tokens=64, max_total_tokens=200, concurrency=8)


def spec(codec: Codec, question: str, sample: int = 0) -> EpisodeSpec:
    return EpisodeSpec(question, codec.encode(CHATML.format("Solve it.", question)), sample)


def endpoint(url: str) -> EndpointConfig:
    return EndpointConfig(name="vllm", base_url=url, model="student", max_retries=0, timeout_s=10)


def test_endpoint_policy_round_trips_ids_and_logprobs(codec: Codec) -> None:
    turns = [codec.encode(code_turn("print(6 * 7)")), codec.encode(ANSWER)]
    script = TurnScript(turns, codec.tokenizer.convert_tokens_to_ids("</observation>"))
    with FakeCompletionsServer(script, latency_s=0.05) as server:
        policy = EndpointPolicy(endpoint(server.url), codec, max_connections=8)
        specs = [spec(codec, f"Q {i}") for i in range(6)]
        episodes = rollout(specs, policy, SpyToolBox(), CONFIG)
    for episode in episodes:
        assert episode.finish == "answer" and episode.turns == 2 and len(episode.tool_calls) == 1
        sampled = [
            (t, lp)
            for t, lp, m in zip(episode.completion_ids, episode.logprobs, episode.mask, strict=True)
            if m
        ]
        assert [t for t, _ in sampled] == turns[0] + turns[1]
        expected = [fake_logprob(i, t) for i, t in enumerate(turns[0])] + [
            fake_logprob(i, t) for i, t in enumerate(turns[1])
        ]
        assert [lp for _, lp in sampled] == expected
        assert codec.decode(episode.completion_ids) == episode.text and episode.text.endswith("</answer>\n")
    first, *_ = server.app.requests
    assert first["prompt"] == specs[0].prompt_ids and first["return_token_ids"] is True
    assert set(first["stop_token_ids"]) == set(codec.stop_ids) and first["logprobs"] == 1
    n = len(specs[0].prompt_ids)
    second = next(
        r for r in server.app.requests if r["prompt"][:n] == specs[0].prompt_ids and len(r["prompt"]) > n
    )
    resumed = episodes[0].mask.index(1, episodes[0].mask.index(0))  # the first sampled id of turn 2
    assert second["prompt"] == episodes[0].prompt_ids + episodes[0].completion_ids[:resumed]
    assert server.app.max_in_flight > 1  # the episodes were in flight together


def test_endpoint_policy_reports_the_token_limit(codec: Codec) -> None:
    long = codec.encode("<plan>\n" + "x " * 100)
    script = TurnScript([long], codec.tokenizer.convert_tokens_to_ids("</observation>"))
    with FakeCompletionsServer(script) as server:
        (episode,) = rollout(
            [spec(codec, "Q")], EndpointPolicy(endpoint(server.url), codec), SpyToolBox(), CONFIG
        )
    assert episode.finish == "generation_limit" and episode.completion_ids == long[:64]


def test_endpoint_policy_keeps_its_connections_busy(codec: Codec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")  # NO_PROXY covers the server
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    script = TurnScript([codec.encode(ANSWER)], codec.tokenizer.convert_tokens_to_ids("</observation>"))
    with FakeCompletionsServer(script, latency_s=0.2) as server:
        policy = EndpointPolicy(endpoint(server.url), codec, max_connections=16)
        wide = CONFIG.model_copy(update={"concurrency": 16})
        episodes = rollout([spec(codec, f"Q {i}") for i in range(32)], policy, SpyToolBox(), wide)
    assert all(e.finish == "answer" for e in episodes)
    assert server.app.max_in_flight == 16  # every connection busy at once, none beyond the bound


def test_env_proxy_is_read_once_with_its_credentials_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    from coa.rollout.policies.endpoint import env_proxy

    monkeypatch.setenv("HTTP_PROXY", "http://user:p%40ss@proxy.local:3128")
    monkeypatch.setenv("NO_PROXY", "vllm.internal")
    proxy, auth = env_proxy("http://gpu-box:8000/v1/completions")
    assert proxy == "http://proxy.local:3128" and (auth.login, auth.password) == ("user", "p@ss")
    assert env_proxy("http://vllm.internal:8000/v1/completions") == (None, None)


def test_unreachable_endpoint_names_the_url(codec: Codec) -> None:
    down = EndpointConfig(
        name="down", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout_s=2
    )
    with pytest.raises(RuntimeError, match=r"http://127.0.0.1:9/v1/completions unreachable"):
        rollout([spec(codec, "Q")], EndpointPolicy(down, codec), SpyToolBox(), CONFIG)


def test_hf_policy_batches_episodes_and_its_ids_decode_to_the_text(tiny_model: Path) -> None:
    import torch

    policy = HFPolicy(str(tiny_model), device="cpu", max_batch=4)
    codec = policy.codec
    assert codec.single_token_stops  # every CoA tag is one token of the tiny vocabulary
    config = RolloutConfig(max_turns=3, max_new_tokens=24, max_total_tokens=40, concurrency=6)
    specs = [spec(codec, f"What is {i} + 30?") for i in range(6)]
    episodes = rollout(specs, policy, SpyToolBox(), config)
    assert policy.calls < sum(e.turns for e in episodes)  # generations of several episodes shared a call
    for episode in episodes:
        assert codec.decode(episode.completion_ids) == episode.text
        assert 1 <= episode.turns <= 3 and 0 < episode.completion_tokens <= 40
        assert all(
            lp is not None and lp <= 0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m
        )
    # Greedy: the same episodes again give the same ids; the logprobs are the model's own.
    again = rollout(specs, HFPolicy(str(tiny_model), device="cpu", max_batch=2), SpyToolBox(), config)
    assert [e.completion_ids for e in again] == [e.completion_ids for e in episodes]
    episode = episodes[0]
    ids = torch.tensor([episode.prompt_ids + episode.completion_ids])
    with torch.inference_mode():
        logits = policy.model(ids).logits[0, len(episode.prompt_ids) - 1 : -1]
    model_logprobs = torch.log_softmax(logits.float(), -1).gather(1, ids[0, len(episode.prompt_ids) :, None])[
        :, 0
    ]
    for recorded, computed, m in zip(episode.logprobs, model_logprobs.tolist(), episode.mask, strict=True):
        if m:
            assert recorded is not None and math.isclose(recorded, computed, abs_tol=1e-3)


def test_hf_policy_samples_with_temperature(tiny_model: Path) -> None:
    import torch

    torch.manual_seed(0)
    policy = HFPolicy(str(tiny_model), device="cpu")
    config = RolloutConfig(
        max_turns=1, max_new_tokens=16, max_total_tokens=16, temperature=1.0, concurrency=4
    )
    episodes = rollout([spec(policy.codec, "Q", k) for k in range(4)], policy, SpyToolBox(), config)
    assert len({tuple(e.completion_ids) for e in episodes}) > 1  # four samples of one prompt differ
    assert all(policy.codec.decode(e.completion_ids) == e.text for e in episodes)
    assert Sampling(1.0).greedy is False and Sampling().greedy is True


def test_hf_batcher_survives_a_wake_up_set_while_it_generated() -> None:
    """Requests that arrive while a batch generates leave the wake-up set; after they are served the
    batcher must wait for new work, not start a batch of nothing (that once killed it and hung every
    later request: the demo's RL phase waited forever)."""
    import asyncio
    import time
    from collections import deque

    from coa.rollout import Generation, Sampling
    from coa.rollout.policies.hf import HFPolicy

    policy = HFPolicy.__new__(HFPolicy)
    policy.max_batch, policy.window_s, policy.calls = 4, 0.0, 0
    policy._pending, policy._wake, policy._batcher = deque(), None, None
    batches: list[int] = []

    def generate_batch(prompts: list[list[int]], budgets: list[int], sampling: Sampling) -> list[Generation]:
        batches.append(len(prompts))
        time.sleep(0.05)
        return [Generation(ids=[p[0]], logprobs=[0.0], finish="eos") for p in prompts]

    policy.generate_batch = generate_batch  # type: ignore[method-assign]
    greedy = Sampling()

    async def main() -> list[int]:
        await policy.start()
        try:
            first = asyncio.create_task(policy.generate([1], 4, greedy))
            await asyncio.sleep(0.02)  # the first batch is generating
            second = asyncio.create_task(policy.generate([2], 4, greedy))  # sets the wake-up meanwhile
            done = await asyncio.wait_for(asyncio.gather(first, second), 5)
            await asyncio.sleep(0.1)  # the batcher idles with nothing pending
            third = await asyncio.wait_for(policy.generate([3], 4, greedy), 5)
            return [g.ids[0] for g in (*done, third)]
        finally:
            await policy.stop()

    assert asyncio.run(main()) == [1, 2, 3]
    assert batches == [1, 1, 1]
