"""The teacher through the same benchmark and metrics as the student, and their token comparison.

:func:`teacher_eval_table` turns the multi-agent teacher's runs on a task table (``trajectory.v1``,
scored as curation scores them) into ``eval.v1`` rows, so :mod:`coa.evaluate.metrics` summarises
both the same way. The teacher's tokens are every token its agents sent and received over all their
model calls (the endpoint's ``usage``; the offline teacher counts with the Qwen2.5 vocabulary,
:func:`coa.agents.tokens.qwen_token_count`); the student's are its one pass (``total_tokens``: prompt,
generated tokens and the observations it read, in its own tokenizer). Neither is a bytes/token
estimate.

:func:`token_comparison` gives, per benchmark: both pass@1, both tokens per task, the token
reduction (1 − student/teacher) and the cost-of-pass ratio (student over teacher: dollars when both
models are priced, else tokens per solved task).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

ALL = "all"


def teacher_eval_table(runs: pa.Table, tasks: pa.Table, judge: Any = None) -> pa.Table:
    """``eval.v1`` rows for the teacher's runs on ``tasks`` (scored like curation; sample = run order)."""
    import schemas
    from coa.scoring.runs import score_runs

    scored = score_runs(runs, tasks, judge).to_pylist()
    source = {r["task_id"]: r["source"] for r in tasks.select(["task_id", "source"]).to_pylist()}
    seen: dict[str, int] = {}
    out = []
    for run in scored:
        if run["task_id"] not in source:
            continue
        sample = seen.get(run["task_id"], 0)
        seen[run["task_id"]] = sample + 1
        out.append(
            {
                "eval_id": f"{run['teacher']}:{run['task_id']}:{sample}",
                "model": run["teacher"],
                "task_id": run["task_id"],
                "benchmark": source[run["task_id"]],
                "family": run["family"],
                "sample_index": sample,
                "prediction": run["final_answer"],
                "correct": bool(run["correct"]),
                "score": float(bool(run["correct"])),
                "format_valid": run["status"] == "completed",
                "format_error": None
                if run["status"] == "completed"
                else f"teacher run ended: {run['status']}",
                "n_turns": run["n_steps"],
                "n_tool_calls": run["n_tool_calls"],
                "prompt_tokens": run["prompt_tokens"],
                "completion_tokens": run["completion_tokens"],
                "total_tokens": run["prompt_tokens"] + run["completion_tokens"],
                "gold_in_observation": False,
                "latency_s": run["latency_s"],
                "text": run["final_answer"] or "",
                "error": run["error"],
            }
        )
    return schemas.EVAL.from_rows(out)


def token_comparison(
    student: Mapping[str, Mapping[str, Any]], teacher: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row per benchmark both were evaluated on (then ``all``): accuracy, tokens, ratios.

    ``student`` / ``teacher`` are the ``benchmarks`` sections of their metrics documents.
    """
    names = [b for b in student if b in teacher and b != ALL] + (
        [ALL] if ALL in student and ALL in teacher else []
    )
    rows = []
    for name in names:
        s, t = student[name], teacher[name]
        s_tokens, t_tokens = s.get("total_tokens_per_task"), t.get("total_tokens_per_task")
        dollars = s.get("cost_of_pass") is not None and t.get("cost_of_pass") is not None
        s_cop = s.get("cost_of_pass") if dollars else _tokens_per_pass(s)
        t_cop = t.get("cost_of_pass") if dollars else _tokens_per_pass(t)
        rows.append(
            {
                "benchmark": name,
                "tasks": s.get("tasks"),
                "student_pass@1": s.get("pass@1"),
                "student_pass@1_se": s.get("pass@1_se"),
                "teacher_pass@1": t.get("pass@1"),
                "teacher_pass@1_se": t.get("pass@1_se"),
                "student_tokens_per_task": s_tokens,
                "teacher_tokens_per_task": t_tokens,
                "token_reduction": 1 - s_tokens / t_tokens if s_tokens is not None and t_tokens else None,
                "cost_of_pass_unit": "dollars" if dollars else "tokens",
                "cost_of_pass_ratio": s_cop / t_cop if s_cop is not None and t_cop else None,
            }
        )
    return rows


def _tokens_per_pass(m: Mapping[str, Any]) -> float | None:
    """Expected tokens per solved task: tokens of one attempt over pass@1 (cost-of-pass in tokens)."""
    tokens, p = m.get("total_tokens_per_task"), m.get("pass@1")
    return tokens / p if tokens is not None and p else None
