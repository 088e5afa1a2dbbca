"""Runs and correct runs per task, counted batch by batch and kept on disk until the end.

The curate step writes them as the artifact's ``task_stats`` table (``task_stats.v1``: task id,
runs, correct runs, sorted by task id; the convert step reads it for RL difficulty selection). Each
batch's counts (task id, two integers) go to a temporary Parquet file (:class:`FrameSpill`), not
to memory: with nearly one task per run they would grow with the input, and merging them as they
come needed as much again. :meth:`TaskStats.frame` sums them once, at the end, and
:meth:`TaskStats.tables` hands them out in slices, never one Python object per task. (Artifacts
before ``task_stats.v1`` hold ``task_stats.json`` instead: ``{task_id: [runs, correct]}``;
:func:`from_json` reads it into the same frame.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl
import pyarrow as pa

from coa.curate.spill import FrameSpill

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
    """Streaming counts of runs and correct runs per ``task_id``; :meth:`close` drops the file."""

    def __init__(self) -> None:
        self._spill = FrameSpill(prefix="coa-task-stats-")

    def add(self, table: pa.Table) -> None:
        """Count the runs of a scored ``trajectory.v1`` batch (``correct`` null counts as wrong)."""
        frame = pl.DataFrame(pl.from_arrow(table.select(["task_id", "correct"])))
        self._spill.append(
            frame.group_by("task_id").agg(
                runs=pl.len().cast(pl.Int64), correct=pl.col("correct").fill_null(False).sum().cast(pl.Int64)
            )
        )

    def frame(self) -> pl.DataFrame:
        """One row per task: ``task_id``, ``runs``, ``correct``, sorted by task id (no :meth:`add`
        after this)."""
        parts = self._spill.scan()
        if parts is None:
            return pl.DataFrame(schema=EMPTY_SCHEMA)
        merged = parts.group_by("task_id").agg(pl.col("runs").sum(), pl.col("correct").sum())
        return merged.sort("task_id").collect()

    def tables(self, rows: int = SLICE_ROWS) -> Iterator[pa.Table]:
        """The sorted counts as ``task_stats.v1`` tables of at most ``rows`` rows (at least one)."""
        frame = self.frame()
        for start in range(0, max(frame.height, 1), rows):
            yield frame.slice(start, rows).to_arrow()

    @property
    def disk_bytes(self) -> int:
        return self._spill.disk_bytes

    def close(self) -> None:
        self._spill.close()
