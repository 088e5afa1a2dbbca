"""The engine's lockstep schedule: the same episodes as async, waves that do not follow timing, and a
seeded HF sampling run that repeats token for token."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pytest

from coa.rollout import Codec, EpisodeSpec, Generation, RolloutConfig, Sampling, rollout
from coa.rollout.engine import lockstep
from coa.rollout.policies.hf import HFPolicy
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.rollout.policy import WavePolicy

from .helpers import ANSWER, CHATML, SpyToolBox, code_turn

CONFIG = RolloutConfig(max_turns=4, max_new_tokens=64, max_total_tokens=200, concurrency=3)
LOOP = code_turn("print(1)")
REPLIES = {
    "Q one": [ANSWER],
    "Q two": [code_turn("print(2)"), ANSWER],
    "Q three": [code_turn("print(3)"), code_turn("print(4)"), ANSWER],
    "Q loops": [LOOP],
    "Q long": ["<plan>\n" + "x " * 200],
    "Q forged": ["<observation>\n42\n</observation>"],
}


def spec(codec: Codec, question: str, sample: int = 0) -> EpisodeSpec:
    return EpisodeSpec(question, codec.encode(CHATML.format("Solve it.", question)), sample)


class WaveScripted(ScriptedPolicy):
    """A scripted policy that decodes whole waves and records each wave's questions, in order."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.waves: list[list[str]] = []

    async def generate_wave(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], sampling: Sampling
    ) -> list[Generation]:
        self.waves.append([self.codec.decode(p).split("user\n")[1].split("<|im_end|>")[0] for p in prompts])
        return [await self.generate(p, n, sampling) for p, n in zip(prompts, max_new_tokens, strict=True)]


class Progress:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


def record(episodes: list) -> list[tuple]:  # type: ignore[type-arg]
    """What an episode is, token for token (not its timings)."""
    return [
        (e.task_id, e.sample_index, e.completion_ids, e.mask, e.finish, e.error, e.turns, e.text,
         [(c.tool, c.argument) for c in e.tool_calls])
        for e in episodes
    ]  # fmt: skip


def test_lockstep_runs_the_same_episodes_as_async(codec: Codec) -> None:
    specs = [spec(codec, q, k) for q in REPLIES for k in range(2)]
    runs = {
        schedule: rollout(
            specs,
            ScriptedPolicy(codec, REPLIES),
            SpyToolBox(),
            CONFIG.model_copy(update={"schedule": schedule}),
        )
        for schedule in ("async", "lockstep")
    }
    assert record(runs["lockstep"]) == record(runs["async"])
    finishes = {e.task_id: e.finish for e in runs["lockstep"]}
    assert finishes == {
        "Q one": "answer", "Q two": "answer", "Q three": "answer", "Q loops": "turn_limit",
        "Q long": "generation_limit", "Q forged": "format_error",
    }  # fmt: skip


def test_waves_follow_the_specs_not_the_timing_of_tools(codec: Codec) -> None:
    specs = [spec(codec, q) for q in REPLIES]
    seen: list[list[list[str]]] = []
    for delays in ({"print(2)": 0.2}, {"print(3)": 0.2, "print(4)": 0.1}):
        policy = WaveScripted(codec, REPLIES, latency_s={"Q one": 0.05})
        progress = Progress()
        episodes = rollout(specs, policy, SpyToolBox(delays=delays), CONFIG, progress)
        assert [e.task_id for e in episodes] == list(REPLIES)
        assert progress.calls == [(i, len(specs)) for i in range(1, len(specs) + 1)]
        seen.append(policy.waves)
    assert seen[0] == seen[1]  # other tool delays, the same waves
    assert seen[0] == [
        ["Q one", "Q two", "Q three"],  # the first `concurrency` specs
        ["Q two", "Q three", "Q loops"],  # "Q one" answered: the next spec takes its place
        ["Q three", "Q loops", "Q long"],
        ["Q loops", "Q forged"],  # "Q long" hit its generation limit, "Q three" answered
        ["Q loops"],
    ]
    assert all(len(wave) <= CONFIG.concurrency for wave in seen[0])


def test_auto_runs_wave_policies_in_lockstep_and_the_others_async(codec: Codec) -> None:
    plain, waves = ScriptedPolicy(codec, REPLIES), WaveScripted(codec, REPLIES)
    assert isinstance(waves, WavePolicy) and not isinstance(plain, WavePolicy)
    auto = CONFIG  # schedule defaults to auto
    assert auto.schedule == "auto" and lockstep(waves, auto) and not lockstep(plain, auto)
    assert lockstep(plain, auto.model_copy(update={"schedule": "lockstep"}))
    assert not lockstep(waves, auto.model_copy(update={"schedule": "async"}))


def test_a_policy_error_in_a_wave_is_raised_and_the_policy_stopped(codec: Codec) -> None:
    class Failing(WaveScripted):
        stopped = False

        async def stop(self) -> None:
            type(self).stopped = True

    with pytest.raises(KeyError, match="no scripted reply"):
        rollout(
            [spec(codec, "Q one"), spec(codec, "Q unknown")], Failing(codec, REPLIES), SpyToolBox(), CONFIG
        )
    assert Failing.stopped


def sample(
    tiny_model: Path, delays: dict[str, float], schedule: Literal["auto", "lockstep"]
) -> list[list[int]]:
    import torch

    torch.manual_seed(0)
    policy = HFPolicy(str(tiny_model), device="cpu", max_batch=3)
    config = RolloutConfig(
        max_turns=3, max_new_tokens=12, max_total_tokens=30, temperature=1.0, concurrency=8, schedule=schedule
    )
    specs = [
        EpisodeSpec(f"q{i}", policy.codec.chat_prompt_ids("Solve it.", f"What is {i} + 7?")) for i in range(8)
    ]
    episodes = rollout(specs, policy, SpyToolBox(delays=delays), config)
    assert policy.calls >= 3  # every wave of 8 decoded in batches of at most 3
    return [e.completion_ids for e in episodes]


def test_seeded_hf_sampling_repeats_token_for_token_in_lockstep(tiny_model: Path) -> None:
    first = sample(tiny_model, {}, "lockstep")
    again = sample(tiny_model, {"": 0.01}, "lockstep")  # every tool call 10 ms slower
    assert again == first
    assert len({tuple(ids) for ids in first}) > 1  # sampled at T = 1: the episodes differ
    assert sample(tiny_model, {}, "auto") == first  # auto: HF generate is a wave policy
