"""Scoring finished runs against their tasks: what curation and the training report both use.

Answers of QA and math runs are checked by rule (:func:`coa.scoring.score_answer`; web answers
through an LLM judge when one is given); programs by running the task's tests in the sandbox
(:func:`coa.tools.code.run_tests`), several runs at once since a sandbox start waits on the OS far
more than on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from coa.scoring import ScoringError, score_answer
from coa.scoring.code import program_and_tests
from coa.tools.code import io_tests, run_tests_batch
from coa.tools.sandbox import SandboxConfig

SCORING_WORKERS = 2
"""Sandboxes scoring code runs at once (each keeps one warm sandbox for many runs)."""
SCORING_SANDBOX = SandboxConfig(cpu_seconds=5, wall_seconds=10)

AnswerScorer = Callable[[str | None, list[str], str], bool | None]


def fill_correct(table: pa.Table, score: AnswerScorer) -> tuple[pa.Table, list[str | None]]:
    """Set ``correct`` from ``score`` for every run; where it returns None the old value stays.

    Returns the table and, per run, the error raised by ``score`` (a raising scorer counts as
    "cannot score" for that run, and the error is kept for the quarantine detail). ``score`` is
    called once per distinct (answer, golds, family) of the batch.
    """
    answers = table.column("final_answer").to_pylist()
    golds = table.column("gold_answers").to_pylist()
    families = table.column("family").to_pylist()
    old = table.column("correct").to_pylist()
    values: list[bool | None] = []
    errors: list[str | None] = []
    seen: dict[tuple[str | None, tuple[str, ...], str], tuple[bool | None, str | None]] = {}
    for answer, gold, family, before in zip(answers, golds, families, old, strict=True):
        key = (answer, tuple(gold or ()), family)
        if key not in seen:  # samples of a task often give the same answer: score it once a batch
            try:
                seen[key] = (score(answer, list(key[1]), family), None)
            except Exception as e:  # noqa: BLE001 - one bad row must not stop the stage
                seen[key] = (None, f"{type(e).__name__}: {e}")
        verdict, error = seen[key]
        errors.append(error)
        values.append(before if verdict is None else bool(verdict))
    idx = table.schema.get_field_index("correct")
    return table.set_column(idx, table.schema.field(idx), pa.array(values, pa.bool_())), errors


def tests_of(case: Mapping[str, Any]) -> list[Any]:
    """The tests of a ``task.v1`` ``test_cases`` struct: stdin/stdout pairs or one functional test
    (bare: :func:`coa.scoring.code.program_and_tests` adds the ``fn_name`` harness)."""
    if case["kind"] == "functional":
        return [case["functional"]]
    return list(io_tests(case["stdin"], case["expected_output"]))


def code_tests(tasks: pa.Table) -> dict[str, dict[str, Any]]:
    """Task id → ``test_cases`` for the code tasks of a ``task.v1`` table."""
    rows = tasks.select(["task_id", "family", "test_cases"]).to_pylist()
    return {t["task_id"]: t["test_cases"] for t in rows if t["family"] == "code" and t["test_cases"]}


def answer_scorer(judge: Any = None) -> AnswerScorer:
    """QA/math answers by rule, web ones through ``judge`` when given; code is scored by its tests."""

    def score(prediction: str | None, golds: list[str], family: str) -> bool | None:
        if family == "code" or not golds:
            return None  # code runs are scored from their tests (score_code)
        try:
            return score_answer(prediction, golds, family, judge=judge if family == "web" else None).correct
        except (ScoringError, ImportError):
            return None

    return score


def score_code(
    batch: pa.Table, tests: Mapping[str, Mapping[str, Any]], sandbox: SandboxConfig = SCORING_SANDBOX
) -> pa.Table:
    """``batch`` (trajectory.v1) with ``correct`` of its code runs filled by the task's tests."""
    correct = batch.column("correct").to_pylist()
    families = batch.column("family").to_pylist()
    answers = batch.column("final_answer").to_pylist()
    task_ids = batch.column("task_id").to_pylist()
    todo: dict[int, tuple[str, list[Any]]] = {}
    for i, (family, answer, task_id) in enumerate(zip(families, answers, task_ids, strict=True)):
        if family != "code" or task_id not in tests:
            continue
        if not answer:
            correct[i] = False
            continue
        todo[i] = program_and_tests(answer, tests[task_id])
    if todo:
        # One warm sandbox per worker scores many runs, each test a fresh process and /tmp (~3 ms a
        # test against ~28 ms a sandbox start): bench/bench_sandbox.py.
        reports = run_tests_batch(list(todo.values()), sandbox, fail_fast=True, workers=SCORING_WORKERS)
        for i, report in zip(todo, reports, strict=True):
            correct[i] = report.all_passed
    index = batch.schema.get_field_index("correct")
    return batch.set_column(index, "correct", pa.array(correct, pa.bool_()))


def score_runs(runs: pa.Table, tasks: pa.Table, judge: Any = None) -> pa.Table:
    """``runs`` (trajectory.v1) with ``correct`` filled exactly as curation scores them."""
    return fill_correct(score_code(runs, code_tests(tasks)), answer_scorer(judge))[0]
