"""Runs and correct runs per task, counted batch by batch and kept on disk until the end.

The curate step writes them as the artifact's ``task_stats`` table (``task_stats.v1``: task id,
runs, correct runs, sorted by task id; the convert step reads it for RL difficulty selection). Each
batch's counts (task id, two integers) go to a temporary Parquet file (:class:`FrameSpill`), not
to memory: with nearly one task per run they would grow with the input, and merging them as they
come needed as much again. :meth:`TaskStats.tables` sums them at the end, one range of task ids at
a time (a group-by and sort of all ~1M ids at once took ~200 MB), and hands them out in sorted
slices, never one Python object per task. (Artifacts
before ``task_stats.v1`` hold ``task_stats.json`` instead: ``{task_id: [runs, correct]}``;
:func:`from_json` reads it into the same frame.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from coa.curate.spill import FrameSpill
from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

SLICE_ROWS = 100_000
"""Rows per table :meth:`TaskStats.tables` yields (one Parquet write each)."""

PART_ROWS = 25_000
"""Spilled rows summed at a time by :meth:`TaskStats.tables` (one range of task ids)."""


def empty_schema() -> dict[str, type[pl.DataType]]:
    """The columns of a task-stats frame (a function: polars is imported where it runs, coa.lazy)."""
    return {"task_id": pl.String, "runs": pl.Int64, "correct": pl.Int64}


def from_json(text: str | bytes) -> pl.DataFrame:
    """The frame of an old artifact's ``task_stats.json`` (``{task_id: [runs, correct]}``)."""
    counts: dict[str, list[int]] = json.loads(text)
    return pl.DataFrame(
        {
            "task_id": list(counts),
            "runs": [int(v[0]) for v in counts.values()],
            "correct": [int(v[1]) for v in counts.values()],
        },
        schema=empty_schema(),
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
        return pl.DataFrame(pl.from_arrow(pa.concat_tables(self.tables())))

    def tables(self, rows: int = SLICE_ROWS, part_rows: int = PART_ROWS) -> Iterator[pa.Table]:
        """The sorted counts as ``task_stats.v1`` tables of at most ``rows`` rows (at least one).

        The counts are summed one range of task ids at a time (ranges of about ``part_rows`` of
        the spilled rows, cut at a sample's quantiles), so only one range's group-by and sort are
        in memory; the ranges come in order, so the tables are sorted as a whole."""
        spilled = self._spill.scan()
        if spilled is None:
            yield pl.DataFrame(schema=empty_schema()).to_arrow()
            return
        bounds = self._bounds(math.ceil(self._spill.rows / part_rows))
        task = pl.col("task_id")
        yielded = False
        for lo, hi in zip([None, *bounds], [*bounds, None], strict=True):
            part = spilled
            if lo is not None:
                part = part.filter(task >= lo)
            if hi is not None:
                part = part.filter(task < hi)
            summed = part.group_by("task_id").agg(pl.col("runs").sum(), pl.col("correct").sum())
            frame = summed.sort("task_id").collect()
            for start in range(0, frame.height, rows):
                yielded = True
                yield frame.slice(start, rows).to_arrow()
        if not yielded:
            yield pl.DataFrame(schema=empty_schema()).to_arrow()

    def _bounds(self, parts: int) -> list[str]:
        """``parts - 1`` increasing task ids that cut the spilled ids into ranges of about equal
        size (quantiles of a sample of ~64 ids per range)."""
        if parts <= 1:
            return []
        every = max(1, self._spill.rows // (parts * 64))
        sample: list[str] = []
        seen = 0
        for batch in pq.ParquetFile(self._spill.path).iter_batches(columns=["task_id"], batch_size=65_536):
            ids = batch.column(0)
            first = (-seen) % every
            sample.extend(ids.slice(first).to_pylist()[::every])
            seen += len(ids)
        ordered = pl.Series(sample, dtype=pl.String).sort().to_list()
        cuts = [ordered[len(ordered) * i // parts] for i in range(1, parts)]
        return list(dict.fromkeys(cuts))  # increasing; a repeated cut would make an empty range

    @property
    def disk_bytes(self) -> int:
        return self._spill.disk_bytes

    def close(self) -> None:
        self._spill.close()
