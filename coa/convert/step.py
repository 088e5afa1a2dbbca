"""The convert step: a curate artifact → ``sft`` (sft.v1), ``rl_prompts`` (rl_prompt.v1), ``quarantine``.

All three tables are streamed: curated runs and tasks are read a batch at a time and each batch's
rows are written at once, so memory is bounded by the batch, not the input. Given an executor
(``execution.engine: ray``), the SFT examples are made in shards (:mod:`coa.convert.shards`) and
written back batch by batch in table order: the same tables as in one process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import Field

import schemas
from coa import io
from coa.convert.config import ConvertConfig
from coa.convert.core import rl_prompts, sft_examples
from coa.convert.shards import converted_batches
from coa.curate.step import TASK_STATS_JSON, TASK_STATS_TABLE
from coa.curate.task_stats import empty_schema, from_json
from coa.lazy import lazy_module
from coa.steps import Build, Stage, Step, StepInput, StepSummary

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "conversion")

SFT_BATCH_ROWS = 1000
RL_BATCH_ROWS = 10_000


class ConvertSummary(StepSummary):
    """What the convert step wrote: rows per table."""

    sft: int = Field(description="SFT examples (sft.v1).")
    rl_prompts: int = Field(description="RL prompts (rl_prompt.v1).")
    quarantine: int = Field(description="Runs and tasks set aside, each with its reason.")


def step(config: ConvertConfig, curated: StepInput, tasks: StepInput, name: str = "convert") -> Step:
    """Convert the curated runs (``trajectories`` of ``curated``) and the RL prompts of ``tasks``."""
    return STAGE.step(config, {"curated": curated, "tasks": tasks}, name=name)


def teacher_stats(curated: io.ArtifactRef) -> pl.DataFrame:
    """The curate artifact's runs and correct runs per task as one columnar frame (a few dozen bytes
    a task, never a Python object per task); an old artifact's ``task_stats.json`` is read into the
    same frame; none: empty (every task unrun)."""
    if TASK_STATS_TABLE in curated.tables:
        return pl.DataFrame(pl.from_arrow(io.read_table(curated, TASK_STATS_TABLE)))
    if TASK_STATS_JSON in curated.files:
        return from_json(io.read_file(curated, TASK_STATS_JSON))
    return pl.DataFrame(schema=empty_schema())


def stats_of(stats: pl.DataFrame, tasks: pa.Table) -> dict[str, tuple[int, int]]:
    """``task_id -> (runs, correct)`` for the tasks of one batch that have stats."""
    ids = pl.Series("task_id", tasks.column("task_id").to_pylist(), dtype=pl.String)
    found = stats.filter(pl.col("task_id").is_in(ids.implode()))
    return {t: (r, c) for t, r, c in found.iter_rows()}


def _build(b: Build) -> None:
    config: ConvertConfig = b.step.config
    curated, tasks = b.table("curated"), b.table("tasks")
    stats = teacher_stats(curated.ref)
    scratch = b.store.checkpoint_uri(b.writer.uri)
    with (
        b.writer.table_writer("sft", schemas.SFT) as write_sft,
        b.writer.table_writer("rl_prompts", schemas.RL_PROMPT) as write_prompts,
        b.writer.table_writer("quarantine", schemas.QUARANTINE) as write_quarantine,
    ):
        if b.executor is not None:  # SFT examples in shards on the executor (execution.engine: ray)
            for table, part in converted_batches(b.executor, curated, config, SFT_BATCH_ROWS, scratch):
                (write_sft if table == "sft" else write_quarantine)(part)
        else:
            for batch in io.iter_batches(curated.ref, curated.table, batch_rows=SFT_BATCH_ROWS):
                examples, rejected = sft_examples(batch.to_pylist(), config, curated.uri)
                if examples:
                    write_sft(schemas.SFT.from_rows(examples))
                if rejected:
                    write_quarantine(schemas.QUARANTINE.from_rows(rejected))
        groups = 0
        for part in io.iter_batches(tasks.ref, tasks.table, batch_rows=RL_BATCH_ROWS):
            prompts, rejected = rl_prompts(part, stats_of(stats, part), config, tasks.uri, first_group=groups)
            groups += len(prompts)
            if prompts:
                write_prompts(schemas.RL_PROMPT.from_rows(prompts))
            if rejected:
                write_quarantine(schemas.QUARANTINE.from_rows(rejected))
    rows = {name: int(info["rows"]) for name, info in b.writer.tables.items()}
    b.report(ConvertSummary(sft=rows["sft"], rl_prompts=rows["rl_prompts"], quarantine=rows["quarantine"]))
    if b.executor is not None:
        fs, folder = io.filesystem(scratch)
        b.cleanup.append(lambda: fs.rm(folder, recursive=True) if fs.exists(folder) else None)


STAGE = Stage(
    name="convert",
    kind="converted",
    build=_build,
    config=ConvertConfig,
    expects={"curated": "trajectory.v1", "tasks": "task.v1"},
    produces={"sft": "sft.v1", "rl_prompts": "rl_prompt.v1", "quarantine": "quarantine.v1"},
    summary=ConvertSummary,
    describe="CoA SFT examples and RL prompts",
)
