"""Metrics of an ``eval.v1`` table, per family and over all tasks (pass@1 on sample 0)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

ALL = "all"
FIELDS = ("n", "format_valid", "accuracy", "tokens_per_task", "tool_calls_per_task", "tokens_per_solved")


def eval_metrics(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per family and ``all``: n, format_valid, accuracy, tokens (per task, per solved), tool calls per task.

    Rates are fractions in [0, 1]; ``tokens_per_task`` is the mean of generated tokens (observations
    not counted); ``tokens_per_solved`` is all generated tokens over the number solved (None if
    none was).
    """
    columns = ["family", "sample_index", "correct", "format_valid", "completion_tokens", "n_tool_calls"]
    rows = [r for r in table.select(columns).to_pylist() if r["sample_index"] == 0]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["family"], []).append(row)
    groups = dict(sorted(groups.items()))
    groups[ALL] = rows
    return {family: _summary(group) for family, group in groups.items()}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    if n == 0:
        return {"n": 0, "format_valid": None, "accuracy": None, "tokens_per_task": None,
                "tool_calls_per_task": None, "tokens_per_solved": None}  # fmt: skip
    solved = sum(bool(r["correct"]) for r in rows)
    tokens = sum(int(r["completion_tokens"]) for r in rows)
    return {
        "n": n,
        "format_valid": sum(bool(r["format_valid"]) for r in rows) / n,
        "accuracy": solved / n,
        "tokens_per_task": tokens / n,
        "tool_calls_per_task": sum(int(r["n_tool_calls"]) for r in rows) / n,
        "tokens_per_solved": tokens / solved if solved else None,
    }


def format_metrics_table(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """The metrics as an aligned plain-text table (rates in percent)."""
    header = [
        "family",
        "tasks",
        "format-valid",
        "accuracy",
        "tokens/task",
        "tool calls/task",
        "tokens/solved",
    ]
    body = []
    for family, m in metrics.items():
        body.append(
            [
                family,
                str(m["n"]),
                cell(m["format_valid"], "{:.1%}"),
                cell(m["accuracy"], "{:.1%}"),
                cell(m["tokens_per_task"], "{:,.1f}"),
                cell(m["tool_calls_per_task"], "{:.2f}"),
                cell(m["tokens_per_solved"], "{:,.1f}"),
            ]
        )
    return aligned_table([header, *body])


def aligned_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells as text: first column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cell(value: Any, fmt: str) -> str:
    """``value`` formatted, or ``n/a`` when it is missing."""
    return "n/a" if value is None else fmt.format(value)
