"""Runs and correct runs per task, accumulated batch by batch in a compact Polars frame.

The curate step writes them as ``task_stats.json`` (task id -> ``[runs, correct runs]``, keys
sorted; the convert step reads it for RL difficulty selection). Kept as columns (task id, two
integers) merged every few batches, not as a Python dict of lists, so the state is a few dozen
bytes per task; :meth:`TaskStats.to_json` writes exactly what ``json.dumps(dict, sort_keys=True)``
writes for the same numbers.
"""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa

MERGE_EVERY = 16
"""Per-batch frames held before they are merged into one."""


class TaskStats:
    """Streaming counts of runs and correct runs per ``task_id``."""

    def __init__(self) -> None:
        self._parts: list[pl.DataFrame] = []

    def add(self, table: pa.Table) -> None:
        """Count the runs of a scored ``trajectory.v1`` batch (``correct`` null counts as wrong)."""
        frame = pl.DataFrame(pl.from_arrow(table.select(["task_id", "correct"])))
        self._parts.append(
            frame.group_by("task_id").agg(
                runs=pl.len().cast(pl.Int64), correct=pl.col("correct").fill_null(False).sum().cast(pl.Int64)
            )
        )
        if len(self._parts) >= MERGE_EVERY:
            self._parts = [self.frame()]

    def frame(self) -> pl.DataFrame:
        """One row per task: ``task_id``, ``runs``, ``correct``, sorted by task id."""
        if not self._parts:
            return pl.DataFrame(schema={"task_id": pl.String, "runs": pl.Int64, "correct": pl.Int64})
        merged = pl.concat(self._parts).group_by("task_id").agg(pl.col("runs").sum(), pl.col("correct").sum())
        return merged.sort("task_id")

    def to_json(self) -> str:
        """``json.dumps({task_id: [runs, correct]}, sort_keys=True)``, written column-wise."""
        frame = self.frame()
        body = ", ".join(
            f"{json.dumps(t)}: [{r}, {c}]"
            for t, r, c in zip(
                frame["task_id"].to_list(), frame["runs"].to_list(), frame["correct"].to_list(), strict=True
            )
        )
        return "{" + body + "}"

    def approx_bytes(self) -> int:
        return int(sum(p.estimated_size() for p in self._parts))
