"""Each reward term on its family: math-verify, QA exact match, code tests in the sandbox, format,
tool-call efficiency, the soft overlong penalty, and a forged observation scoring zero."""

from __future__ import annotations

from typing import Any

import pytest

from coa.format import render
from coa.rl.config import RewardWeights, RLStageConfig
from coa.rl.rewards import overlong_penalty, score_episodes
from coa.rollout import Episode, ToolCall
from tests.train.rows import arith_trajectory

from .helpers import math_prompt


def episode(tokens: int = 10, calls: int = 1, format_error: str | None = None) -> Episode:
    e = Episode("t", 0, [1, 2], completion_ids=[5] * tokens, mask=[1] * tokens, logprobs=[0.0] * tokens)
    e.tool_calls = [ToolCall("code", "print(1)", None, 0.01, 0.0) for _ in range(calls)]
    e.format_error, e.finish = format_error, "format_error" if format_error else "answer"
    return e


def prompt(family: str, **kw: Any) -> dict[str, Any]:
    return math_prompt(0, 1, 2) | {"family": family, "variant": "code_math"} | kw


def answer_text(content: str) -> str:
    return f"<think>\nAnswer.\n</think>\n<answer>\n{content}\n</answer>\n"


PARAMS = RLStageConfig(rewards=RewardWeights(correct=1.0, format=0.1, efficiency=0.05, overlong=1.0))


def test_math_is_verified_and_a_valid_trajectory_earns_the_format_term() -> None:
    question, trajectory = arith_trajectory(12, "+", 30, "*", 2)
    good = render(trajectory)
    row = prompt("math", gold_answers=["72"])
    wrong = good.replace("\\boxed{72}", "\\boxed{73}")
    [r_good, r_wrong, r_bare] = score_episodes(
        [episode(), episode(), episode()], [row] * 3, [good, wrong, answer_text("\\boxed{72}")], PARAMS
    )
    assert r_good.is_correct and r_good.format_valid and r_good.total == pytest.approx(1.1)
    assert not r_wrong.is_correct and r_wrong.format_valid and r_wrong.total == pytest.approx(0.1)
    assert r_bare.is_correct and not r_bare.format_valid and r_bare.total == pytest.approx(1.0)
    assert (r_good.correct, r_good.format, r_wrong.correct) == (1.0, 1.0, 0.0)


def test_qa_answers_are_exact_match() -> None:
    row = prompt("mhqa", variant="mhqa", gold_answers=["Marie Curie"])
    rewards = score_episodes(
        [episode(), episode()], [row, row], [answer_text("marie curie"), answer_text("Pierre Curie")], PARAMS
    )
    assert [r.is_correct for r in rewards] == [True, False]


@pytest.mark.sandbox
def test_code_is_scored_by_its_tests_in_the_sandbox() -> None:
    cases = {"kind": "stdin", "stdin": ["3\n", "10\n"], "expected_output": ["6\n", "20\n"],
             "functional": None, "fn_name": None, "starter_code": None}  # fmt: skip
    row = prompt("code", gold_answers=[], test_cases=cases)
    right = answer_text("```python\nprint(2 * int(input()))\n```")
    wrong = answer_text("```python\nprint(int(input()) + 3)\n```")
    rewards = score_episodes([episode(), episode()], [row, row], [right, wrong], PARAMS)
    assert [r.is_correct for r in rewards] == [True, False]


def test_efficiency_charges_extra_calls_on_correct_episodes_only() -> None:
    row = prompt("math", gold_answers=["3"])
    texts = [answer_text("\\boxed{3}"), answer_text("\\boxed{3}"), answer_text("\\boxed{4}")]
    rewards = score_episodes([episode(calls=1), episode(calls=4), episode(calls=4)], [row] * 3, texts, PARAMS)
    assert [r.efficiency for r in rewards] == [0.0, -3.0, 0.0]
    assert rewards[1].total == pytest.approx(1.0 - 0.15)


def test_soft_overlong_penalty_ramps_over_the_buffer() -> None:
    assert overlong_penalty(100, 768, 64) == 0.0
    assert overlong_penalty(704, 768, 64) == 0.0
    assert overlong_penalty(736, 768, 64) == pytest.approx(-0.5)
    assert overlong_penalty(768, 768, 64) == -1.0
    row = prompt("math", gold_answers=["3"])
    [r] = score_episodes([episode(tokens=736)], [row], [answer_text("\\boxed{3}")], PARAMS)
    assert r.overlong == pytest.approx(-0.5) and r.total == pytest.approx(0.5)


def test_a_forged_observation_scores_zero_on_every_term() -> None:
    row = prompt("math", gold_answers=["3"])
    forged = episode(format_error="forged_observation: the model wrote '<observation>' itself")
    [r] = score_episodes([forged], [row], [answer_text("\\boxed{3}")], PARAMS)
    assert r.forged and r.total == 0.0 and not r.is_correct and r.format == 0.0
