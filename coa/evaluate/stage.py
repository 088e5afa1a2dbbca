"""The evaluation core: a CoA model on ``task.v1`` tasks → scored runs (``eval.v1``) and their metrics.

Each task is prompted like the training examples (the variant's system prompt in the configured
style, the question as the user turn, the model's chat template), run through
:func:`coa.evaluate.inference.run_loop`, checked against the variant's grammar, and scored the way
curation scores the teacher: math and QA answers by rule, programs by the task's tests in the
sandbox (:func:`coa.scoring.runs.tests_of`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from coa.evaluate.config import EvalConfig
from coa.evaluate.generation import EndpointGenerator, Generator, HFGenerator
from coa.evaluate.inference import CoaRun, LoopLimits, run_loop
from coa.format import FormatError, extract_answer, parse, system_prompt, validate
from coa.format.from_run import FAMILY_VARIANT

EVAL_TABLE = "eval"
METRICS_FILE = "metrics.json"
SCORING_WORKERS = 4


def select_tasks(tasks: pa.Table, config: EvalConfig) -> list[dict[str, Any]]:
    """The tasks to run: the configured families, the first ``limit_per_family`` of each."""
    rows = tasks.to_pylist()
    if config.families is not None:
        rows = [r for r in rows if r["family"] in config.families]
    if config.limit_per_family is not None:
        seen: dict[str, int] = {}
        kept = []
        for row in rows:
            seen[row["family"]] = seen.get(row["family"], 0) + 1
            if seen[row["family"]] <= config.limit_per_family:
                kept.append(row)
        rows = kept
    return rows


def variant_of(family: str, variants: Mapping[str, str]) -> str:
    """The CoA variant of a family (``variants`` overrides, as in the convert stage)."""
    chosen = variants.get(family, "auto")
    return FAMILY_VARIANT[family] if chosen == "auto" else chosen


def model_fingerprint(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:12]


def evaluate_tasks(
    tasks: pa.Table,
    generator: Generator,
    toolbox: Any,
    config: EvalConfig,
    progress: Callable[[int, int], None] | None = None,
) -> pa.Table:
    """Run ``generator`` on the selected tasks; an ``eval.v1`` table, one row per task."""
    import schemas

    rows = select_tasks(tasks, config)
    runs = []
    for row in rows:
        variant = variant_of(row["family"], config.variants)
        system, _ = system_prompt(variant, config.prompt_style)
        runs.append(CoaRun(row["task_id"], variant, generator.chat_prompt(system, row["question"])))
    limits = LoopLimits(config.max_turns, config.max_new_tokens, config.max_total_tokens, config.batch_size)
    finished = [0]

    def advance(n: int) -> None:
        finished[0] += n
        if progress is not None:
            progress(finished[0], len(runs))

    start = time.perf_counter()
    run_loop(runs, generator, toolbox, limits, advance)
    elapsed = time.perf_counter() - start
    scores = score_runs(rows, runs)
    fingerprint = model_fingerprint(generator.name)
    out = []
    for row, run, (prediction, correct, score) in zip(rows, runs, scores, strict=True):
        valid, error = check_format(run)
        out.append(
            {
                "eval_id": f"{fingerprint}:{row['task_id']}:0",
                "model": generator.name,
                "task_id": row["task_id"],
                "benchmark": row["source"],
                "family": row["family"],
                "sample_index": 0,
                "prediction": prediction,
                "correct": correct,
                "score": score,
                "format_valid": valid,
                "format_error": error,
                "n_turns": run.turns,
                "n_tool_calls": run.tool_calls,
                "prompt_tokens": generator.count_tokens(run.prompt),
                "completion_tokens": run.completion_tokens,
                "latency_s": elapsed / max(1, len(runs)),  # batched: the mean share of the wall time
                "text": run.text,
                "error": run.error,
            }
        )
    return schemas.EVAL.from_rows(out)


def check_format(run: CoaRun) -> tuple[bool, str | None]:
    """Whether the run's text is a complete, valid trajectory of its variant, else the first violation."""
    if run.format_error is not None:
        return False, run.format_error
    try:
        result = validate(parse(run.text), run.variant)
    except FormatError as e:
        return False, f"{e.rule}: {e}"
    if not result.ok:
        assert result.error is not None
        return False, f"{result.error.rule}: {result.error.message}"
    return True, None


def score_runs(rows: list[dict[str, Any]], runs: list[CoaRun]) -> list[tuple[str | None, bool, float]]:
    """``(prediction, correct, score)`` per run, as curation scores the teacher's answers."""
    from coa.scoring import ScoringError, score_answer
    from coa.scoring.runs import tests_of
    from coa.tools.code import run_tests
    from coa.tools.sandbox import SandboxConfig

    sandbox = SandboxConfig(cpu_seconds=5, wall_seconds=10)

    def one(pair: tuple[dict[str, Any], CoaRun]) -> tuple[str | None, bool, float]:
        row, run = pair
        prediction = extract_answer(run.text) if "<answer>" in run.text else None
        if prediction is None:
            return None, False, 0.0
        if row["family"] == "code":
            if not row.get("test_cases"):
                return prediction, False, 0.0
            report = run_tests(prediction, tests_of(row["test_cases"]), config=sandbox, fail_fast=True)
            return prediction, report.all_passed, float(report.all_passed)
        golds = list(row.get("gold_answers") or [])
        if not golds:
            return prediction, False, 0.0
        try:
            verdict = score_answer(prediction, golds, row["family"])
        except (ScoringError, ImportError):
            return prediction, False, 0.0
        return prediction, verdict.correct, float(verdict.value)

    with ThreadPoolExecutor(max_workers=SCORING_WORKERS) as pool:
        return list(pool.map(one, zip(rows, runs, strict=True)))


def open_generator(config: EvalConfig, model: str) -> Generator:
    """The generator of ``config.backend`` for ``model`` (a local folder, or the endpoint's tokenizer)."""
    if config.backend == "endpoint":
        assert config.endpoint is not None
        return EndpointGenerator(config.endpoint, tokenizer=model, temperature=0.0)
    return HFGenerator(model)


def read_metrics(ref: Any) -> dict[str, Any]:
    """The ``metrics.json`` of an ``eval`` artifact."""
    from coa import io

    return dict(json.loads(io.read_file(ref, METRICS_FILE)))
