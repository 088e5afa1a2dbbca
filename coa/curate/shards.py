"""Curation's per-shard part, the scoring of runs, on an executor; the global part stays in the step.

Scoring (a program's tests in the sandbox, an answer by rule or by the judge) looks at one run at a
time, so it splits into shards: each shard scores the read batches whose first row falls in its
row range and writes them, one row group per batch, to ``scored-<k>-of-<n>.parquet`` in the
curation's checkpoint folder (under a temporary name, then moved into place: a shard whose file
exists is not scored again). The step then streams those row groups, shard by shard, into the
filters, decontamination, deduplication and the gate, which need every run in order. The batches
it reads back are the very batches the one-process build scores (same boundaries, same values), so
the curated artifact is the same.
"""

from __future__ import annotations

import dataclasses
import posixpath
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from coa import io
from coa.execution import ShardExecutor, shard_ranges
from coa.llm import LLMConfig
from coa.scoring.runs import answer_scorer, code_tests, fill_correct, score_code
from coa.steps import TableInput

SHARD_TASK = "curate-score-shard"


@dataclasses.dataclass(frozen=True)
class ScoreShard:
    """The batches of a raw table whose first row lies in ``[start, stop)``, and where they go."""

    index: int
    raw: TableInput
    tasks: TableInput
    judge: LLMConfig | None
    batch_rows: int
    start: int
    stop: int
    out: str


def score_shard(shard: ScoreShard) -> int:
    """Score the shard's batches into its file (skipped when the file exists); its row count."""
    fs, path = io.filesystem(shard.out)
    if fs.exists(path):
        with fs.open(path, "rb") as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    tests = code_tests(shard.tasks.read(["task_id", "family", "test_cases"]))
    judge = None
    if shard.judge is not None:
        from coa.scoring.judge import LLMJudge

        judge = LLMJudge(shard.judge)
    score = answer_scorer(judge)
    tmp = posixpath.join(posixpath.dirname(path), f".tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}")
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    rows = offset = 0
    try:
        with fs.open(tmp, "wb") as fh, pq.ParquetWriter(fh, schemas.TRAJECTORY.schema) as writer:
            for batch in io.iter_batches(shard.raw.ref, shard.raw.table, batch_rows=shard.batch_rows):
                first, offset = offset, offset + batch.num_rows
                if first >= shard.stop:
                    break
                if first < shard.start:
                    continue
                filled, _ = fill_correct(score_code(batch, tests), score)
                writer.write_table(schemas.TRAJECTORY.conform(filled), row_group_size=max(1, filled.num_rows))
                rows += filled.num_rows
        fs.mv(tmp, path)
    finally:
        if judge is not None:
            judge.close()
        if fs.exists(tmp):
            fs.rm(tmp)
    return rows


def scored_batches(
    executor: ShardExecutor,
    raw: TableInput,
    tasks: TableInput,
    judge: LLMConfig | None,
    batch_rows: int,
    folder: str,
) -> Iterator[pa.Table]:
    """Score ``raw`` in shards on ``executor``, then yield its scored batches in table order."""
    ranges = shard_ranges(raw.rows(), executor.shards)
    shards = [
        ScoreShard(
            k,
            raw,
            tasks,
            judge,
            batch_rows,
            start,
            stop,
            io.join(folder, f"scored-{k}-of-{len(ranges)}.parquet"),
        )
        for k, (start, stop) in enumerate(ranges)
    ]
    executor.map(score_shard, shards, SHARD_TASK)
    for shard in shards:
        fs, path = io.filesystem(shard.out)
        with fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            for group in range(parquet.num_row_groups):
                yield schemas.TRAJECTORY.conform(parquet.read_row_group(group))
