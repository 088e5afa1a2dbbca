"""Scoring a prediction against its ``task.v1`` row: the answer checks evaluation and RL rewards share.

:func:`score_prediction` scores one final answer the way curation scores the teacher's runs: math
and QA answers by rule (:func:`coa.scoring.score_answer`), programs by the task's tests in the
sandbox (:func:`coa.scoring.runs.tests_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coa.scoring import ScoringError, score_answer
from coa.scoring.runs import SCORING_SANDBOX, tests_of
from coa.tools.code import run_tests
from coa.tools.sandbox import SandboxConfig


def score_prediction(
    task: Mapping[str, Any], prediction: str | None, sandbox: SandboxConfig = SCORING_SANDBOX
) -> tuple[bool, float]:
    """``(correct, score)`` of ``prediction`` (an answer segment's content, or None) for ``task``."""
    if prediction is None:
        return False, 0.0
    if task["family"] == "code":
        if not task.get("test_cases"):
            return False, 0.0
        report = run_tests(prediction, tests_of(task["test_cases"]), config=sandbox, fail_fast=True)
        return report.all_passed, float(report.all_passed)
    golds = list(task.get("gold_answers") or [])
    if not golds:
        return False, 0.0
    try:
        verdict = score_answer(prediction, golds, task["family"])
    except (ScoringError, ImportError):
        return False, 0.0
    return verdict.correct, float(verdict.value)
