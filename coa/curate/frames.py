"""Flattened views of a ``trajectory.v1`` batch: one row per run, and one row per step.

The step view is cut out of the nested ``steps`` column with Arrow compute (flatten + parent
indices), taking only the step fields asked for, so heavy fields such as observations are never
copied unless a check needs them. Both views are Polars frames; ``row`` is the run's position in
the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

RUN_COLUMNS = (
    "run_id",
    "task_id",
    "family",
    "status",
    "n_steps",
    "n_tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "correct",
)


def _as_array(col: pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def step_frame(table: pa.Table, fields: Sequence[str]) -> pl.DataFrame:
    """``row`` (run position in ``table``) plus the given step fields, one row per step."""
    steps = _as_array(table.column("steps"))
    flat = pc.list_flatten(steps)
    data: dict[str, pa.Array] = {"row": pc.list_parent_indices(steps).cast(pa.int64())}
    for name in fields:
        data[name] = pc.struct_field(flat, name)
    return pl.DataFrame(pl.from_arrow(pa.table(data)))


def run_frame(table: pa.Table, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """The narrow per-run numbers: ids, family, status, counts, tokens, correctness, answer length.

    Step-derived columns: ``n_tool_errors`` (tool calls with an error), ``max_observation_chars``;
    ``steps`` is the batch's step frame with ``role``, ``error`` and ``observation`` if the caller
    has one already.
    """
    df = pl.DataFrame(pl.from_arrow(table.select(list(RUN_COLUMNS))))
    answer_chars = pc.utf8_length(_as_array(table.column("final_answer")))
    if steps is None:
        steps = step_frame(table, ("role", "error", "observation"))
    per_run = steps.group_by("row").agg(
        n_tool_errors=((pl.col("role") == "tool_call") & pl.col("error").is_not_null()).sum(),
        max_observation_chars=pl.col("observation").str.len_chars().max().fill_null(0),
    )
    df = (
        df.with_row_index("row")
        .with_columns(
            row=pl.col("row").cast(pl.Int64),
            tokens=pl.col("prompt_tokens") + pl.col("completion_tokens"),
            answer_chars=pl.Series("answer_chars", answer_chars).fill_null(0),
        )
        .join(per_run, on="row", how="left")
        .with_columns(
            n_tool_errors=pl.col("n_tool_errors").fill_null(0).cast(pl.Int64),
            max_observation_chars=pl.col("max_observation_chars").fill_null(0).cast(pl.Int64),
            answer_chars=pl.col("answer_chars").cast(pl.Int64),
        )
        .sort("row")
    )
    return df
