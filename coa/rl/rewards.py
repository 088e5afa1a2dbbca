"""Reward terms of an RL episode, per family, each kept apart so it can be logged on its own.

* ``correct``: the task's own check, as evaluation scores it (:mod:`coa.scoring`): QA exact match,
  math-verify for math, every test passing in the sandbox for code (LiveCodeBench functional tests
  through the ``fn_name`` harness; all the batch's programs in a few warm sandboxes:
  :func:`coa.tools.code.run_tests_batch`), web answers by exact match, else the LLM judge when one
  is given (:mod:`coa.rl.judge_audit`), else token F1;
* ``format``: 1 when the trajectory is valid under its variant's grammar (:mod:`coa.format`);
* ``efficiency``: minus one per tool call beyond ``free_tool_calls``, on correct episodes only;
* ``overlong``: DAPO's soft penalty, 0 up to ``max_total_tokens - overlong_buffer`` generated
  tokens, then falling linearly to -1 at the budget.

An episode that wrote an environment tag itself (a forged observation) gets 0 on every term, so no
forged text is ever rewarded. ``total`` is the weighted sum the advantages are computed from.

Rewards keep their own scoring on purpose: ``correct`` is :func:`coa.scoring.tasks.score_prediction`
(the family rule curation also uses), not the per-benchmark scorers evaluation reports with
(:mod:`coa.scoring.benchmarks`: GAIA's rule, BrowseComp's and HLE's graders, LiveCodeBench's tests,
AFM's math-verify and first-answer EM). A reward must be dense and cheap and must not need a grader
model per episode; an evaluation must mean what a leaderboard's number means. So changing how a
benchmark is reported never changes what a model is trained on; a run's evaluation rows name the
scorer that produced them (``eval.v1`` ``scorer``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from coa.format import check_format, extract_answer
from coa.rl.config import RLStageConfig
from coa.rollout import Episode
from coa.scoring import AnswerJudge

TERMS = ("correct", "format", "efficiency", "overlong")
"""The reward terms, in the order the trainer's reward functions are given."""


@dataclasses.dataclass(frozen=True)
class Reward:
    """The terms of one episode, its weighted total, and what they were computed from."""

    correct: float
    format: float
    efficiency: float
    overlong: float
    total: float
    is_correct: bool
    format_valid: bool
    forged: bool
    prediction: str | None

    def term(self, name: str) -> float:
        return float(getattr(self, name))


def decode_completion(episode: Episode, eos_ids: frozenset[int], decode: Any) -> str:
    """The episode's completion ids decoded, without the end-of-turn ids the model or the engine closed
    it with (unlike :func:`coa.rollout.model_text`, which keeps the episode's own text when it did not
    end on an end-of-turn id)."""
    ids = list(episode.completion_ids)
    while ids and ids[-1] in eos_ids:
        ids.pop()
    return str(decode(ids))


def is_forged(episode: Episode) -> bool:
    return bool(episode.format_error and episode.format_error.startswith("forged_observation"))


def question_of(prompt: Mapping[str, Any]) -> str:
    """The user turn of an ``rl_prompt.v1`` row (what a judge is shown as the question)."""
    return next((str(m["content"]) for m in prompt["prompt"] if m["role"] == "user"), "")


def overlong_penalty(tokens: int, max_tokens: int, buffer: int) -> float:
    """DAPO soft overlong punishment: 0 below ``max_tokens - buffer``, then linear down to -1."""
    start = max_tokens - buffer
    if tokens <= start:
        return 0.0
    return -min(1.0, (tokens - start) / buffer)


def score_episodes(
    episodes: Sequence[Episode],
    prompts: Sequence[Mapping[str, Any]],
    texts: Sequence[str],
    params: RLStageConfig,
    judge: AnswerJudge | None = None,
) -> list[Reward]:
    """The reward of each episode against its ``rl_prompt.v1`` row (same order)."""
    predictions = [extract_answer(t) if "<answer>" in t else None for t in texts]
    correct = correctness(prompts, predictions, judge)
    weights = params.rewards
    out = []
    for episode, prompt, text, prediction, ok in zip(
        episodes, prompts, texts, predictions, correct, strict=True
    ):
        if is_forged(episode):
            out.append(Reward(0.0, 0.0, 0.0, 0.0, 0.0, False, False, True, prediction))
            continue
        valid, _ = check_format(text, prompt["variant"], episode.format_error)
        extra_calls = max(0, len(episode.tool_calls) - params.free_tool_calls)
        terms = {
            "correct": float(ok),
            "format": float(valid),
            "efficiency": -float(extra_calls) if ok else 0.0,
            "overlong": overlong_penalty(
                episode.completion_tokens, params.max_total_tokens, params.overlong_buffer
            ),
        }
        total = sum(getattr(weights, name) * value for name, value in terms.items())
        out.append(
            Reward(
                **terms, total=total, is_correct=ok, format_valid=valid, forged=False, prediction=prediction
            )
        )
    return out


def correctness(
    prompts: Sequence[Mapping[str, Any]], predictions: Sequence[str | None], judge: AnswerJudge | None = None
) -> list[bool]:
    """Whether each prediction is correct for its prompt: code by its tests (batched), else by rule
    (web answers through ``judge`` when given)."""
    from coa.scoring.code import program_and_tests
    from coa.scoring.runs import SCORING_SANDBOX
    from coa.scoring.tasks import score_prediction
    from coa.tools.code import run_tests_batch

    out = [False] * len(prompts)
    code_jobs: list[tuple[int, str, Any]] = []
    for i, (prompt, prediction) in enumerate(zip(prompts, predictions, strict=True)):
        if prediction is None:
            continue
        if prompt["family"] == "code":
            if prompt.get("test_cases"):
                code_jobs.append((i, *program_and_tests(prediction, prompt["test_cases"])))
            continue
        task = {**prompt, "question": question_of(prompt)}
        out[i] = score_prediction(task, prediction, judge=judge)[0]
    if code_jobs:
        reports = run_tests_batch(
            [(code, tests) for _, code, tests in code_jobs], SCORING_SANDBOX, fail_fast=True
        )
        for (i, _, _), report in zip(code_jobs, reports, strict=True):
            out[i] = report.all_passed
    return out
