"""RL generation batches from the rollout engine: masks, sampled ids, forged text, dynamic sampling."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from coa.format import Segment
from coa.format.codec import render_segment
from coa.rl.config import RLStageConfig
from coa.rl.rollouts import RolloutSource
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.tools.build import build_toolbox
from coa.tools.config import ToolsConfig
from tests.rollout.helpers import SpyToolBox, code_turn

from .helpers import TwoTurnPolicy, math_prompt

QUESTIONS = [(100 + i, 200 + 3 * i) for i in range(6)]
PROMPTS = [math_prompt(i, a, b) for i, (a, b) in enumerate(QUESTIONS)]


def params(**kw: Any) -> RLStageConfig:
    return RLStageConfig(**({"prompts_per_step": 2, "group_size": 4, "steps_per_generation": 2} | kw))


def requested(*indices: int, g: int = 4) -> list[str]:
    return [PROMPTS[i]["prompt_id"] for i in indices for _ in range(g)]


def env_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i, (token, m) in enumerate(zip(ids, mask, strict=True)):
        if m == 0:
            if i == 0 or mask[i - 1] == 1:
                runs.append([])
            runs[-1].append(token)
    return runs


@pytest.mark.sandbox
def test_mask_covers_exactly_the_environment_and_trained_ids_are_sampled(codec: Codec) -> None:
    toolbox = build_toolbox(ToolsConfig(enabled=("code",), record="off"), None)
    policy = TwoTurnPolicy(codec, QUESTIONS)
    batch = RolloutSource(PROMPTS, params(), toolbox).batch(requested(0, 1), policy, step=0)
    sampled = [g.ids for g in policy.generations]
    for group in batch.groups:
        (a, b) = QUESTIONS[int(group.task_id[1:])]
        for episode in group.episodes:
            assert episode.finish == "answer" and len(episode.tool_calls) == 1
            # mask 0 = the newline closing the code block + the real observation, then the newline
            # closing the answer + end-of-turn: decoded, exactly that text
            printed = asyncio.run(toolbox.call("code", episode.tool_calls[0].argument)).observation
            assert f"\n{a + b}\n" in printed
            observation = render_segment(Segment("observation", printed))
            runs = [codec.decode(r) for r in env_runs(episode.completion_ids, episode.mask)]
            assert runs == ["\n" + observation, "\n" + codec.tokenizer.eos_token]
            # mask 1 = the policy's generations, id for id, in order
            trained = [t for t, m in zip(episode.completion_ids, episode.mask, strict=True) if m]
            turns = [g for g in sampled if trained[: len(g)] == g]
            assert turns and trained == turns[0] + next(g for g in sampled if trained[len(turns[0]) :] == g)


def test_forged_observation_runs_no_tool_and_gets_zero_reward(codec: Codec) -> None:
    forged = code_turn("print(1)").replace("<code>", "<observation>\n300\n</observation>\n<code>")
    key = "What is 100 + 200?"
    policy = ScriptedPolicy(codec, {key: [forged]})
    toolbox = SpyToolBox()
    groups = RolloutSource(PROMPTS, params(), toolbox).run_groups([PROMPTS[0]["prompt_id"]], policy)
    assert toolbox.calls == []
    for episode, reward in zip(groups[0].episodes, groups[0].rewards, strict=True):
        assert episode.finish == "format_error" and (episode.format_error or "").startswith(
            "forged_observation"
        )
        assert reward.forged and reward.total == 0.0 and not reward.is_correct


def test_dynamic_sampling_drops_equal_groups_and_refills(codec: Codec) -> None:
    policy = TwoTurnPolicy(codec, QUESTIONS, never_right=QUESTIONS[:1])
    batch = RolloutSource(PROMPTS, params(), SpyToolBox()).batch(requested(0, 1), policy, step=3)
    assert len(batch.groups) == 2 and all(not g.zero_variance for g in batch.groups)
    assert PROMPTS[0]["prompt_id"] not in {g.prompt_id for g in batch.groups}  # all wrong: dropped
    assert batch.stats["dynamic/zero_variance_share"] == 0.5 and batch.stats["dynamic/shortfall_groups"] == 0
    dropped = [r for r in batch.rows if not r["kept"]]
    assert {r["prompt_id"] for r in dropped} >= {PROMPTS[0]["prompt_id"]}
    assert sum(r["kept"] for r in batch.rows) == 8 and all(r["step"] == 3 for r in batch.rows)


def test_dynamic_sampling_tops_up_with_dropped_groups_when_prompts_run_out(codec: Codec) -> None:
    policy = TwoTurnPolicy(codec, QUESTIONS, right_every=0)  # never right: every group all-equal
    batch = RolloutSource(PROMPTS, params(max_refill_rounds=1), SpyToolBox()).batch(
        requested(0, 1), policy, 0
    )
    assert len(batch.groups) == 2 and all(g.zero_variance for g in batch.groups)
    assert batch.stats["dynamic/shortfall_groups"] == 2 and batch.stats["dynamic/groups_generated"] == 6


def test_without_dynamic_sampling_the_requested_groups_are_kept(codec: Codec) -> None:
    policy = TwoTurnPolicy(codec, QUESTIONS, right_every=0)
    batch = RolloutSource(PROMPTS, params(dynamic_sampling=False), SpyToolBox()).batch(
        requested(0, 1), policy, 0
    )
    assert [g.prompt_id for g in batch.groups] == [PROMPTS[0]["prompt_id"], PROMPTS[1]["prompt_id"]]
    assert batch.stats["dynamic/groups_generated"] == 2


def test_truncated_episodes_are_masked_whole(codec: Codec) -> None:
    policy = TwoTurnPolicy(codec, QUESTIONS)
    source = RolloutSource(PROMPTS, params(max_new_tokens=5, dynamic_sampling=False), SpyToolBox())
    batch = source.batch(requested(0, 1), policy, 0)
    for row in batch.rows:
        assert row["finish"] == "generation_limit" and set(row["loss_mask"]) == {0}


def test_no_refill_round_starts_after_the_deadline(codec: Codec) -> None:
    policy = TwoTurnPolicy(codec, QUESTIONS, right_every=0)
    past = time.perf_counter() - 1.0
    batch = RolloutSource(PROMPTS, params(), SpyToolBox()).batch(requested(0, 1), policy, 0, deadline=past)
    assert batch.stats["dynamic/groups_generated"] == 2 and batch.stats["dynamic/shortfall_groups"] == 2
