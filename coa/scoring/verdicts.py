"""Verdicts of many predictions by each task's benchmark scorer: what evaluation and sampling share.

:func:`score_predictions` scores answers already extracted (an evaluation's runs, a predictions file
re-scored by ``coa score``); :func:`score_texts` extracts the answer of each run text first (the
content of its single ``answer`` segment, never observation text). Each answer is scored by
:func:`coa.scoring.benchmarks.score_task`, several at once (a code scorer waits on its sandbox).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coa.format import extract_answer
from coa.scoring.benchmarks import Verdict, score_task

__all__ = ["BENCHMARK_SCORING_WORKERS", "score_predictions", "score_texts"]

BENCHMARK_SCORING_WORKERS = 4
"""Answers scored at once by :func:`score_predictions`."""


def score_texts(
    rows: Sequence[Mapping[str, Any]],
    texts: Sequence[str],
    judge: Any = None,
    scorers: Mapping[str, str] | None = None,
) -> list[tuple[str | None, Verdict]]:
    """``(prediction, verdict)`` per run text and its task row, by the scorer of the task's benchmark."""
    return score_predictions(
        rows, [extract_answer(t) if "<answer>" in t else None for t in texts], judge, scorers
    )


def score_predictions(
    rows: Sequence[Mapping[str, Any]],
    predictions: Sequence[str | None],
    judge: Any = None,
    scorers: Mapping[str, str] | None = None,
) -> list[tuple[str | None, Verdict]]:
    """``(prediction, verdict)`` per answer and its task row (:func:`coa.scoring.benchmarks.score_task`).

    What an evaluation of a model and a re-scoring of a predictions file (``coa score``) share."""

    def one(pair: tuple[Mapping[str, Any], str | None]) -> tuple[str | None, Verdict]:
        row, prediction = pair
        return prediction, score_task(row, prediction, judge=judge, overrides=scorers)

    with ThreadPoolExecutor(max_workers=BENCHMARK_SCORING_WORKERS) as pool:
        return list(pool.map(one, zip(rows, predictions, strict=True)))
