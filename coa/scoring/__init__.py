"""Answer scoring shared by curation (filters), RL (rewards) and evaluation (metrics).

One entry point, ``score_answer(prediction, gold_answers, family)``, returns a ``Score``. The
prediction is the content of the trajectory's single ``answer`` segment (extracting it, and never
reading observation text, is the format module's job). Per family:

========  =====================================================================================
family    rule
========  =====================================================================================
``mhqa``  normalised exact match over ``|``-separated parts (``mhqa_mode``: ``"all"`` = AFM train
          reward, default; ``"first"`` = AFM val metric). Binary value; token F1 in ``detail``.
``math``  ``math_equal`` against any gold (``\\boxed{}`` extraction, math-verify, numeric
          tolerance, a per-call timeout). Binary.
``web``   normalised exact match of the whole answer. Otherwise, when a ``judge`` is given, its
          verdict; without a judge, token F1 with ``correct = F1 >= f1_threshold`` and
          ``value = F1``, flagged ``method="web:f1_fallback"`` (a stand-in until the LLM judge).
``code``  not scored here: raises ``ScoringError``; run the tests in the sandbox
          (``coa.tools.code.run_tests``).
========  =====================================================================================

These are the family rules that curation and RL rewards use. Evaluation scores each benchmark by
its own published rule (:mod:`coa.scoring.benchmarks`: GAIA, BrowseComp, HLE, LiveCodeBench, AFM's
math-verify and MHQA exact match) and names the scorer in its results.

``Score.value`` is the reward in ``[0, 1]``; ``Score.correct`` the binary verdict used for
filtering and accuracy (for binary methods ``value == float(correct)``); ``Score.method`` says which
rule decided (``"<family>:<rule>"``) so that metrics can be split by it.
"""

from __future__ import annotations

import math as _math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from coa.errors import CoaError
from coa.scoring.math import DEFAULT_TIMEOUT_S, MathVerdict, check_math, extract_boxed, math_equal
from coa.scoring.qa import MultiAnswerMode, exact_match, normalize_answer, split_answers, token_f1

__all__ = [
    "DEFAULT_F1_THRESHOLD",
    "FAMILIES",
    "AnswerJudge",
    "Family",
    "MathVerdict",
    "MultiAnswerMode",
    "Score",
    "ScoringError",
    "check_math",
    "exact_match",
    "extract_boxed",
    "math_equal",
    "normalize_answer",
    "score_answer",
    "split_answers",
    "token_f1",
]

Family = Literal["mhqa", "math", "web", "code"]
FAMILIES: tuple[str, ...] = get_args(Family)

DEFAULT_F1_THRESHOLD = 0.8
"""Token F1 at or above which a web answer without a judge counts as correct."""


class ScoringError(CoaError, ValueError):
    """The request cannot be scored here (unknown family, code answers, no gold answers)."""


@dataclass(frozen=True)
class Score:
    """The score of one answer."""

    value: float
    """Reward in [0, 1]."""
    correct: bool
    """Binary verdict."""
    method: str
    """Which rule decided, ``"<family>:<rule>"``, e.g. ``"mhqa:em:all"``, ``"web:judge"``."""
    detail: str = ""
    """Free text for audits (F1, matched gold, timeout, judge rationale...)."""

    def __post_init__(self) -> None:
        if not (_math.isfinite(self.value) and 0.0 <= self.value <= 1.0):
            raise ValueError(f"Score.value must be in [0, 1], got {self.value!r}")
        if not self.method:
            raise ValueError("Score.method must be non-empty")


class AnswerJudge(Protocol):
    """A grader for open-ended answers, e.g. an LLM judge (supplied by the judge module).

    Called only for web answers that do not exactly match. Returns a bool or a full ``Score``
    (whose ``method``/``detail`` should name the judge, its prompt version and its rationale).
    Retries and failure policy belong to the judge; exceptions propagate to the caller.
    """

    def __call__(
        self, prediction: str, gold_answers: Sequence[str], *, question: str | None
    ) -> Score | bool: ...


def _golds(gold_answers: str | Iterable[str]) -> list[str]:
    golds = [gold_answers] if isinstance(gold_answers, str) else list(gold_answers)
    if not golds:
        raise ScoringError("no gold answers given")
    bad = [g for g in golds if not isinstance(g, str)]
    if bad:
        raise ScoringError(f"gold answers must be strings, got {bad[:3]!r}")
    return golds


def _binary(correct: bool, method: str, detail: str = "") -> Score:
    return Score(1.0 if correct else 0.0, correct, method, detail)


def score_answer(
    prediction: str | None,
    gold_answers: str | Iterable[str],
    family: Family | str,
    *,
    judge: AnswerJudge | None = None,
    question: str | None = None,
    mhqa_mode: MultiAnswerMode = "all",
    f1_threshold: float = DEFAULT_F1_THRESHOLD,
    math_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Score:
    """Score ``prediction`` (an answer segment's content; ``None`` = no answer) against golds.

    ``gold_answers`` is one gold or a list of acceptable golds. ``judge``/``question`` are used
    by the ``web`` family only; ``mhqa_mode`` by ``mhqa``; ``math_timeout_s`` by ``math``.
    Raises ``ScoringError`` for ``code``, an unknown family, or an empty gold list.
    """
    if family == "code":
        raise ScoringError(
            "code answers are scored by running their tests in the sandbox: use "
            "coa.tools.code.run_tests (all tests must pass), not coa.scoring.score_answer"
        )
    if family not in FAMILIES:
        raise ScoringError(f"unknown answer family {family!r}; expected one of {FAMILIES}")
    if not 0.0 < f1_threshold <= 1.0:
        raise ValueError(f"f1_threshold must be in (0, 1], got {f1_threshold}")
    golds = _golds(gold_answers)
    if prediction is None or not prediction.strip():
        return _binary(False, f"{family}:empty", "no answer")

    if family == "mhqa":
        em = exact_match(prediction, golds, mode=mhqa_mode)
        f1 = token_f1(prediction, golds, mode=mhqa_mode)
        parts = len(split_answers(prediction, mhqa_mode))
        return _binary(em, f"mhqa:em:{mhqa_mode}", f"f1={f1:.3f} parts={parts}")

    if family == "math":
        verdict = check_math(prediction, golds, timeout_s=math_timeout_s)
        detail = verdict.reason if verdict.gold is None else f"{verdict.reason} gold={verdict.gold!r}"
        return _binary(verdict.equal, "math:math_verify", detail)

    # web
    if exact_match(prediction, golds, mode="none"):
        return _binary(True, "web:em")
    if judge is not None:
        verdict_or_score = judge(prediction, golds, question=question)
        if isinstance(verdict_or_score, Score):
            return verdict_or_score
        return _binary(bool(verdict_or_score), "web:judge")
    f1 = token_f1(prediction, golds, mode="none")
    return Score(
        f1, f1 >= f1_threshold, "web:f1_fallback", f"f1={f1:.3f} threshold={f1_threshold} (no judge)"
    )
