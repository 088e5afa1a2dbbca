"""Runs and correct runs per task, accumulated batch by batch in a compact Polars frame.

The curate step writes them as the artifact's ``task_stats`` table (``task_stats.v1``: task id,
runs, correct runs, sorted by task id; the convert step reads it for RL difficulty selection). Kept
as columns (task id, two integers) merged every few batches, not as a Python dict of lists, so the
state is a few dozen bytes per task, and written in slices (:meth:`TaskStats.tables`), never as one
Python object per task. (Artifacts before ``task_stats.v1`` hold ``task_stats.json`` instead:
``{task_id: [runs, correct]}``; :func:`from_json` reads it into the same frame.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl
import pyarrow as pa

MERGE_EVERY = 16
"""Per-batch frames held before they are merged into one."""

SLICE_ROWS = 100_000
"""Rows per table :meth:`TaskStats.tables` yields (one Parquet write each)."""

EMPTY_SCHEMA = {"task_id": pl.String, "runs": pl.Int64, "correct": pl.Int64}


def from_json(text: str | bytes) -> pl.DataFrame:
    """The frame of an old artifact's ``task_stats.json`` (``{task_id: [runs, correct]}``)."""
    counts: dict[str, list[int]] = json.loads(text)
    return pl.DataFrame(
        {
            "task_id": list(counts),
            "runs": [int(v[0]) for v in counts.values()],
            "correct": [int(v[1]) for v in counts.values()],
        },
        schema=EMPTY_SCHEMA,
    ).sort("task_id")


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
            return pl.DataFrame(schema=EMPTY_SCHEMA)
        merged = pl.concat(self._parts).group_by("task_id").agg(pl.col("runs").sum(), pl.col("correct").sum())
        return merged.sort("task_id")

    def tables(self, rows: int = SLICE_ROWS) -> Iterator[pa.Table]:
        """The sorted counts as ``task_stats.v1`` tables of at most ``rows`` rows (at least one)."""
        frame = self.frame()
        for start in range(0, max(frame.height, 1), rows):
            yield frame.slice(start, rows).to_arrow()

    def approx_bytes(self) -> int:
        return int(sum(p.estimated_size() for p in self._parts))
