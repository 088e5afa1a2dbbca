"""The evaluation core: a CoA model on ``task.v1`` tasks → scored runs (``eval.v1``) and their metrics.

Each task is prompted like the training examples (the variant's system prompt in the configured
style, the question as the user turn, the model's chat template) and run by the rollout engine
(:func:`coa.evaluate.inference.run_tasks`, ``samples`` episodes per task), checked against the
variant's grammar, and scored: math and QA answers by rule, programs by the task's tests in the
sandbox, web answers by rule or an LLM grader, each by the scorer of its benchmark
(:mod:`coa.scoring.benchmarks`: GAIA's rule, LiveCodeBench's tests, math-verify as AFM uses it…),
named in every row (``scorer``, ``scorer_version``, ``score_detail``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from coa.evaluate.config import EvalConfig
from coa.evaluate.generation import open_policy
from coa.evaluate.inference import run_tasks
from coa.evaluate.leak import gold_in_observations
from coa.format import check_format
from coa.format.from_run import variant_of
from coa.rollout import Episode, Policy, model_text
from coa.scoring.verdicts import score_texts

__all__ = ["evaluate_tasks", "open_generator", "read_metrics", "select_tasks"]

EVAL_TABLE = "eval"
METRICS_FILE = "metrics.json"


def select_tasks(tasks: pa.Table, config: EvalConfig) -> list[dict[str, Any]]:
    """The tasks to run: the configured families, the first ``limit_per_family`` of each family and
    the first ``limit_per_benchmark`` of each benchmark (task.v1 ``source``)."""
    rows = tasks.to_pylist()
    if config.families is not None:
        rows = [r for r in rows if r["family"] in config.families]
    rows = _first(rows, "family", config.limit_per_family)
    return _first(rows, "source", config.limit_per_benchmark)


def _first(rows: list[dict[str, Any]], column: str, limit: int | None) -> list[dict[str, Any]]:
    if limit is None:
        return rows
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        seen[row[column]] = seen.get(row[column], 0) + 1
        if seen[row[column]] <= limit:
            kept.append(row)
    return kept


def model_fingerprint(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:12]


def evaluate_tasks(
    tasks: pa.Table,
    policy: Policy,
    toolbox: Any,
    config: EvalConfig,
    progress: Callable[[int, int], None] | None = None,
    samples: Sequence[int] | None = None,
    judge: Any = None,
) -> pa.Table:
    """Run ``policy`` on the selected tasks; an ``eval.v1`` table, one row per task and sample.

    ``samples`` gives the episodes of each selected task (default: ``config.samples`` for all);
    tasks with one sample run greedily, the others at the configured temperature / top-p. ``judge``
    scores open web answers that do not match exactly (:class:`coa.scoring.judge.LLMJudge`).
    """
    import schemas

    rows = select_tasks(tasks, config)
    counts = list(samples) if samples is not None else [config.samples] * len(rows)
    if len(counts) != len(rows):
        raise ValueError(f"{len(counts)} sample counts for {len(rows)} tasks")
    episodes: dict[tuple[int, int], Episode] = {}
    for k in sorted(set(counts)):  # one engine run per sample count: greedy and sampled runs apart
        chosen = [i for i, c in enumerate(counts) if c == k]
        run = run_tasks([rows[i] for i in chosen], policy, toolbox, config.model_copy(update={"samples": k}),
                        progress)  # fmt: skip
        for n, episode in enumerate(run):
            episodes[(chosen[n // k], episode.sample_index)] = episode
    order = sorted(episodes)
    task_rows = [rows[i] for i, _ in order]
    runs = [episodes[key] for key in order]
    texts = [model_text(e, policy) for e in runs]
    scores = score_texts(task_rows, texts, judge, config.scorers)
    fingerprint = model_fingerprint(policy.name)
    out = []
    for row, episode, text, (prediction, verdict) in zip(task_rows, runs, texts, scores, strict=True):
        variant = variant_of(row["family"], config.variants or {})
        valid, error = check_format(text, variant, episode.format_error)
        leaked = config.leak_guard.flag_gold and row["family"] != "code"
        out.append(
            {
                "eval_id": f"{fingerprint}:{row['task_id']}:{episode.sample_index}",
                "model": policy.name,
                "task_id": row["task_id"],
                "benchmark": row["source"],
                "family": row["family"],
                "sample_index": episode.sample_index,
                "prediction": prediction,
                "correct": verdict.correct,
                "score": verdict.value,
                "scorer": verdict.scorer.name,
                "scorer_version": verdict.scorer.version,
                "score_detail": verdict.detail,
                "format_valid": valid,
                "format_error": error,
                "n_turns": episode.turns,
                "n_tool_calls": len(episode.tool_calls),
                "prompt_tokens": len(episode.prompt_ids),
                "completion_tokens": episode.completion_tokens,
                "total_tokens": len(episode.prompt_ids) + len(episode.completion_ids),
                "gold_in_observation": leaked
                and gold_in_observations(text, list(row.get("gold_answers") or [])),
                "latency_s": episode.wall_s,
                "text": text,
                "error": episode.error,
            }
        )
    return schemas.EVAL.from_rows(out)


def open_generator(config: EvalConfig, model: str) -> Policy:
    """The policy of ``config.backend`` for ``model`` (see :func:`coa.evaluate.generation.open_policy`)."""
    return open_policy(config, model)


def read_eval_metrics(ref: Any) -> dict[str, Any]:
    """The whole ``metrics.json`` of an ``eval`` artifact: ``{"families": …, "benchmarks": …}``."""
    from coa import io

    return dict(json.loads(io.read_file(ref, METRICS_FILE)))


def read_metrics(ref: Any) -> dict[str, Any]:
    """The per-family metrics (family → metrics, ending with ``all``) of an ``eval`` artifact."""
    return dict(read_eval_metrics(ref)["families"])
