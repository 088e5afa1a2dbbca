"""Scoring predictions made elsewhere: a JSONL of ``(task_id, prediction)``, or AFM's released files.

A published run can be re-scored with the scorers an evaluation uses (:mod:`coa.scoring.benchmarks`)
and compared with the paper's tables: ``coa score FILE --tasks …`` prints the metrics,
``coa evaluate --predictions FILE --tasks …`` writes them as an ``eval`` artifact; both go through
:func:`predictions_table` and :func:`coa.evaluate.metrics.metrics_document`, so their numbers agree.

Accepted rows (JSON Lines, one object a line; several files may be given):

* ``{"task_id", "prediction"}`` with an optional ``sample_index`` (default: the file's round, else
  0). ``task_id`` is the ``task.v1`` id (``gaia_dev_103:<uuid>``) or, when that is not a task id,
  the native id (the part after ``<source>:``);
* AFM's web-agent output (``<outfile>.round_<r>.jsonl``: ``question_id, question, Level,
  golden_answer, prediction, llm_judge, steps, status, error, raw``; shared/reference/afm-spec.md
  §6.1): matched to a task by its question text (the layout carries no task id), the round ``r``
  (from the file name) is the sample index. AFM writes no row for an item without a prediction, so
  the denominator comes from the task set, never from the file.

``prediction`` may be null. Every selected task gets a row per sample index seen (K = the samples of
the file(s)); a task with no prediction for a sample is scored as no answer. A row that matches no
task, or two rows for the same task and sample, is an error (the wrong task set, or a file read
twice), never silently dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.errors import UserError
from coa.scoring.verdicts import score_predictions

ROUND = re.compile(r"round_(\d+)")
NOT_CHECKED = "not checked: scored from a predictions file (no trajectory)"


class PredictionsError(UserError, ValueError):
    """A predictions file cannot be read or does not fit the task set."""


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_prediction_rows(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every row of the files as ``{"key", "question", "prediction", "sample_index", "where"}``."""
    out: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise PredictionsError(f"predictions file {p} not found (give a JSONL of task_id, prediction)")
        round_match = ROUND.search(p.name)
        default_sample = int(round_match.group(1)) if round_match else 0
        for n, line in enumerate(p.read_text("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PredictionsError(
                    f"{p}:{n}: not a JSON object ({e.msg}); one JSON object a line"
                ) from None
            if not isinstance(row, dict) or "prediction" not in row:
                raise PredictionsError(
                    f"{p}:{n}: a row needs a 'prediction' key (and 'task_id', or AFM's 'question')"
                )
            if row.get("task_id") is None and row.get("question") is None:
                raise PredictionsError(
                    f"{p}:{n}: a row needs 'task_id' (or AFM's 'question') to find its task"
                )
            prediction = row["prediction"]
            out.append(
                {
                    "key": None if row.get("task_id") is None else str(row["task_id"]),
                    "question": row.get("question"),
                    "prediction": None if prediction is None else str(prediction),
                    "sample_index": int(row.get("sample_index", default_sample)),
                    "where": f"{p.name}:{n}",
                }
            )
    return out


def _match(
    rows: Sequence[Mapping[str, Any]], tasks: Sequence[Mapping[str, Any]]
) -> list[tuple[str, int, str | None]]:
    by_id = {t["task_id"]: t for t in tasks}
    by_native: dict[str, list[str]] = {}
    by_question: dict[str, list[str]] = {}
    for t in tasks:
        by_native.setdefault(str(t["task_id"]).split(":", 1)[-1], []).append(t["task_id"])
        by_question.setdefault(" ".join(str(t["question"]).split()), []).append(t["task_id"])
    out = []
    for row in rows:
        if row["key"] is not None:
            found = [row["key"]] if row["key"] in by_id else by_native.get(row["key"], [])
        else:
            found = by_question.get(" ".join(str(row["question"]).split()), [])
        if len(found) != 1:
            what = "matches no task" if not found else f"matches {len(found)} tasks"
            raise PredictionsError(
                f"{row['where']}: the prediction {what} of the task set "
                f"({'task_id ' + repr(row['key']) if row['key'] is not None else 'by question text'}); "
                "score it against the task set it was made on (--tasks)"
            )
        out.append((found[0], int(row["sample_index"]), row["prediction"]))
    return out


def predictions_table(
    tasks: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    model: str,
    judge: Any = None,
    scorers: Mapping[str, str] | None = None,
) -> pa.Table:
    """``eval.v1`` rows for ``tasks`` (every one, every sample index seen) from prediction ``rows``."""
    import schemas

    matched = _match(rows, tasks)
    given: dict[tuple[str, int], str | None] = {}
    for task_id, sample, prediction in matched:
        if (task_id, sample) in given:
            raise PredictionsError(f"two predictions for task {task_id} sample {sample}: a file given twice?")
        given[(task_id, sample)] = prediction
    samples = sorted({s for _, s in given}) or [0]
    plan = [(t, s) for t in tasks for s in samples]
    verdicts = score_predictions(
        [t for t, _ in plan], [given.get((t["task_id"], s)) for t, s in plan], judge, scorers
    )
    fingerprint = hashlib.sha256(model.encode()).hexdigest()[:12]
    out = []
    for (task, sample), (prediction, verdict) in zip(plan, verdicts, strict=True):
        missing = (task["task_id"], sample) not in given
        out.append(
            {
                "eval_id": f"{fingerprint}:{task['task_id']}:{sample}",
                "model": model,
                "task_id": task["task_id"],
                "benchmark": task["source"],
                "family": task["family"],
                "sample_index": sample,
                "prediction": prediction,
                "correct": verdict.correct,
                "score": verdict.value,
                "scorer": verdict.scorer.name,
                "scorer_version": verdict.scorer.version,
                "score_detail": "no prediction in the file" if missing else verdict.detail,
                "format_valid": False,
                "format_error": NOT_CHECKED,
                "n_turns": 0,
                "n_tool_calls": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "total_tokens": 0,
                "gold_in_observation": False,
                "latency_s": 0.0,
                "text": prediction or "",
                "error": "no prediction" if missing else None,
            }
        )
    return schemas.EVAL.from_rows(out)


def model_name(paths: Sequence[str | Path]) -> str:
    """The ``model`` of a predictions evaluation: the file names."""
    return "predictions:" + ",".join(Path(p).name for p in paths)


def score_prediction_files(
    tasks: Sequence[Mapping[str, Any]],
    paths: Sequence[str | Path],
    *,
    judge: Any = None,
    scorers: Mapping[str, str] | None = None,
    in_sets: Mapping[str, int] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """The ``eval.v1`` table and ``metrics.json`` document of prediction files on ``tasks``.

    What ``coa score`` prints and ``coa evaluate --predictions`` commits: one code path."""
    from coa.evaluate.metrics import coverage_of, metrics_document

    rows = read_prediction_rows(paths)
    table = predictions_table(tasks, rows, model_name(paths), judge, scorers)
    counts = dict(in_sets) if in_sets is not None else {}
    if in_sets is None:
        for t in tasks:
            counts[t["source"]] = counts.get(t["source"], 0) + 1
    document = metrics_document(table, coverage=coverage_of(counts, table))
    missing = sum(1 for e in table.column("error").to_pylist() if e is not None)
    document["predictions"] = {
        "files": [{"name": Path(p).name, "sha256": file_digest(p)} for p in paths],
        "rows": len(rows),
        "runs_without_prediction": missing,
    }
    return table, document
