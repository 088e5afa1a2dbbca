"""Scoring a prediction against its ``task.v1`` row by its family's rule: what RL rewards use.

Evaluation reports with each benchmark's own rule instead (:mod:`coa.scoring.benchmarks`, whose
``coa-*`` scorers are these family rules for task sets without a published one); rewards keep
these on purpose (:mod:`coa.rl.rewards` says why).

:func:`score_prediction` scores one final answer the way curation scores the teacher's runs: math
and QA answers by rule (:func:`coa.scoring.score_answer`; open web answers through an LLM judge
when one is given), programs by the task's tests in the sandbox (stdin tests, or functional tests
through the ``fn_name`` harness of :func:`coa.scoring.code.program_and_tests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coa.scoring import AnswerJudge, ScoringError, score_answer
from coa.scoring.code import program_and_tests
from coa.scoring.runs import SCORING_SANDBOX
from coa.tools.code import run_tests
from coa.tools.harness_pool import shared_pool
from coa.tools.sandbox import SandboxConfig


def score_prediction(
    task: Mapping[str, Any],
    prediction: str | None,
    sandbox: SandboxConfig = SCORING_SANDBOX,
    judge: AnswerJudge | None = None,
) -> tuple[bool, float]:
    """``(correct, score)`` of ``prediction`` (an answer segment's content, or None) for ``task``."""
    if prediction is None:
        return False, 0.0
    if task["family"] == "code":
        if not task.get("test_cases"):
            return False, 0.0
        program, tests = program_and_tests(prediction, task["test_cases"])
        report = run_tests(program, tests, fail_fast=True, pool=shared_pool(sandbox))
        return report.all_passed, float(report.all_passed)
    golds = list(task.get("gold_answers") or [])
    if not golds:
        return False, 0.0
    try:
        verdict = score_answer(
            prediction,
            golds,
            task["family"],
            judge=judge if task["family"] == "web" else None,
            question=task.get("question"),
        )
    except (ScoringError, ImportError):
        return False, 0.0
    return verdict.correct, float(verdict.value)
