"""The dispatcher ``coa.scoring.score_answer`` and the ``Score`` record.

Run: .venv/bin/python -m pytest tests/scoring/test_score.py -q
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from coa.scoring import DEFAULT_F1_THRESHOLD, Score, ScoringError, score_answer


def test_score_record_is_validated_and_frozen() -> None:
    score = Score(1.0, True, "mhqa:em:all")
    with pytest.raises(dataclasses.FrozenInstanceError):
        score.value = 0.0  # type: ignore[misc]
    for bad in (-0.1, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="value"):
            Score(bad, False, "x")
    with pytest.raises(ValueError, match="method"):
        Score(0.0, False, "")


def test_mhqa_train_and_val_modes() -> None:
    golds = ["Olivia", "MFSK"]
    train = score_answer("Olivia|AM", golds, "mhqa")
    assert train == Score(0.0, False, "mhqa:em:all", train.detail)
    assert "f1=0.500" in train.detail and "parts=2" in train.detail
    val = score_answer("Olivia|AM", golds, "mhqa", mhqa_mode="first")
    assert (val.value, val.correct, val.method) == (1.0, True, "mhqa:em:first")
    rontgen = score_answer("the wilhelm conrad RÖNTGEN", ["Wilhelm Conrad Röntgen"], "mhqa")
    assert rontgen.correct and rontgen.value == 1.0
    near = score_answer("Wilhelm Röntgen", ["Wilhelm Conrad Röntgen"], "mhqa")
    assert not near.correct and near.value == 0.0 and "f1=0.800" in near.detail


def test_math_family() -> None:
    score = score_answer(r"\boxed{(3, \pi/2)}", [r"\left( 3, \frac{\pi}{2} \right)"], "math")
    assert (score.value, score.correct, score.method) == (1.0, True, "math:math_verify")
    assert "gold=" in score.detail
    wrong = score_answer(r"\boxed{28}", "27.0", "math")
    assert (wrong.value, wrong.correct, wrong.detail) == (0.0, False, "not_equal")
    slow = score_answer(r"\boxed{10^{10^{10}}}", "5", "math", math_timeout_s=0.3)
    assert not slow.correct and slow.detail == "timeout"


def test_empty_predictions_score_zero() -> None:
    for family in ("mhqa", "math", "web"):
        for pred in (None, "", "  \n"):
            score = score_answer(pred, ["x"], family)
            assert (score.value, score.correct, score.method) == (0.0, False, f"{family}:empty")


def test_web_without_judge_uses_em_then_flagged_f1_fallback() -> None:
    golds = ["Wilhelm Conrad Röntgen"]
    exact = score_answer("Wilhelm Conrad Röntgen.", golds, "web")
    assert (exact.value, exact.correct, exact.method) == (1.0, True, "web:em")
    close = score_answer("Wilhelm Conrad Röntgen, physicist", golds, "web")
    assert close.method == "web:f1_fallback" and close.correct
    assert close.value == pytest.approx(6 / 7)
    far = score_answer("Röntgen", golds, "web")
    assert far.method == "web:f1_fallback" and not far.correct and far.value == pytest.approx(0.5)
    strict = score_answer("Wilhelm Conrad Röntgen, physicist", golds, "web", f1_threshold=0.9)
    assert not strict.correct
    assert DEFAULT_F1_THRESHOLD == 0.8
    with pytest.raises(ValueError, match="f1_threshold"):
        score_answer("x", golds, "web", f1_threshold=0.0)
    # web answers are not split on "|"
    assert score_answer("EU4Health | programme", ["EU4Health programme"], "web").method == "web:em"


class _RecordingJudge:
    def __init__(self, verdict: Score | bool) -> None:
        self.verdict = verdict
        self.calls: list[tuple[str, list[str], str | None]] = []

    def __call__(self, prediction: str, gold_answers: Sequence[str], *, question: str | None) -> Score | bool:
        self.calls.append((prediction, list(gold_answers), question))
        return self.verdict


def test_web_judge_is_called_only_when_not_exact() -> None:
    judge = _RecordingJudge(True)
    exact = score_answer("34689", ["34689"], "web", judge=judge, question="zip code?")
    assert exact.method == "web:em" and judge.calls == []

    verdict = score_answer("34,689 (Florida)", "34689", "web", judge=judge, question="zip code?")
    assert (verdict.value, verdict.correct, verdict.method) == (1.0, True, "web:judge")
    assert judge.calls == [("34,689 (Florida)", ["34689"], "zip code?")]

    no = score_answer("90210", ["34689"], "web", judge=_RecordingJudge(False))
    assert (no.value, no.correct, no.method) == (0.0, False, "web:judge")


def test_web_judge_may_return_a_full_score() -> None:
    judged = Score(1.0, True, "web:llm_judge:v1", "rationale: same entity")
    assert (
        score_answer("the EU health programme", ["EU4Health"], "web", judge=_RecordingJudge(judged)) is judged
    )


def test_judge_is_ignored_for_other_families() -> None:
    judge = _RecordingJudge(True)
    assert not score_answer("Boston", ["Paris"], "mhqa", judge=judge).correct
    assert not score_answer(r"\boxed{2}", ["3"], "math", judge=judge).correct
    assert judge.calls == []


def test_code_family_points_to_the_sandbox() -> None:
    with pytest.raises(ScoringError, match=r"coa\.tools\.code\.run_tests"):
        score_answer("```python\nprint(1)\n```", ["1"], "code")


def test_bad_requests_raise() -> None:
    with pytest.raises(ScoringError, match="unknown answer family"):
        score_answer("x", ["x"], "chess")
    with pytest.raises(ScoringError, match="no gold answers"):
        score_answer("x", [], "mhqa")
    with pytest.raises(ScoringError, match="must be strings"):
        score_answer("x", [1], "mhqa")  # type: ignore[list-item]
    assert issubclass(ScoringError, ValueError)
