"""Conversion's per-shard part, curated runs → SFT examples, on an executor; RL prompts stay in the step.

Turning a run into a CoA trajectory and counting its tokens looks at one run at a time, so it splits
into shards: each shard converts the read batches whose first row falls in its row range and writes
each batch's examples and rejections as one row group of ``sft-<k>-of-<n>.parquet`` and
``quarantine-<k>-of-<n>.parquet`` in the conversion's checkpoint folder (temporary names, then moved
into place, the SFT file last: a shard whose SFT file exists is not converted again). The step then
writes those row groups, shard by shard, exactly as the one-process build writes each batch, so the
tables are the same. The RL prompts (numbered across the task table) are built in the step.
"""

from __future__ import annotations

import dataclasses
import posixpath
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from coa import io
from coa.convert.config import ConvertConfig
from coa.convert.core import sft_examples
from coa.execution import ShardExecutor, shard_ranges
from coa.steps import TableInput

SHARD_TASK = "convert-shard"


@dataclasses.dataclass(frozen=True)
class ConvertShard:
    """The batches of the curated table whose first row lies in ``[start, stop)``, and their files."""

    index: int
    curated: TableInput
    config: ConvertConfig
    batch_rows: int
    start: int
    stop: int
    sft: str
    quarantine: str


def _open(uri: str) -> tuple[Any, str, str]:
    fs, path = io.filesystem(uri)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    return (
        fs,
        path,
        posixpath.join(posixpath.dirname(path), f".tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}"),
    )


def convert_shard(shard: ConvertShard) -> int:
    """Convert the shard's batches into its two files (skipped when done); its SFT example count."""
    fs, sft_path, sft_tmp = _open(shard.sft)
    if fs.exists(sft_path):
        with fs.open(sft_path, "rb") as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    _, quarantine_path, quarantine_tmp = _open(shard.quarantine)
    examples_n = offset = 0
    try:
        with (
            fs.open(sft_tmp, "wb") as sft_fh,
            fs.open(quarantine_tmp, "wb") as q_fh,
            pq.ParquetWriter(sft_fh, schemas.SFT.schema) as sft_writer,
            pq.ParquetWriter(q_fh, schemas.QUARANTINE.schema) as q_writer,
        ):
            for batch in io.iter_batches(shard.curated.ref, shard.curated.table, batch_rows=shard.batch_rows):
                first, offset = offset, offset + batch.num_rows
                if first >= shard.stop:
                    break
                if first < shard.start:
                    continue
                examples, rejected = sft_examples(batch.to_pylist(), shard.config, shard.curated.uri)
                if examples:
                    sft_writer.write_table(schemas.SFT.from_rows(examples), row_group_size=len(examples))
                    examples_n += len(examples)
                if rejected:
                    q_writer.write_table(schemas.QUARANTINE.from_rows(rejected), row_group_size=len(rejected))
        fs.mv(quarantine_tmp, quarantine_path)
        fs.mv(sft_tmp, sft_path)  # last: its presence marks the shard done
    finally:
        for tmp in (sft_tmp, quarantine_tmp):
            if fs.exists(tmp):
                fs.rm(tmp)
    return examples_n


def converted_batches(
    executor: ShardExecutor, curated: TableInput, config: ConvertConfig, batch_rows: int, folder: str
) -> Iterator[tuple[str, pa.Table]]:
    """Convert ``curated`` in shards on ``executor``; yield ``("sft" | "quarantine", batch)`` in order."""
    ranges = shard_ranges(curated.rows(), executor.shards)
    n = len(ranges)
    shards = [
        ConvertShard(
            k,
            curated,
            config,
            batch_rows,
            start,
            stop,
            io.join(folder, f"sft-{k}-of-{n}.parquet"),
            io.join(folder, f"quarantine-{k}-of-{n}.parquet"),
        )
        for k, (start, stop) in enumerate(ranges)
    ]
    executor.map(convert_shard, shards, SHARD_TASK)
    for shard in shards:
        for table, uri, contract in (
            ("sft", shard.sft, schemas.SFT),
            ("quarantine", shard.quarantine, schemas.QUARANTINE),
        ):
            fs, path = io.filesystem(uri)
            with fs.open(path, "rb") as fh:
                parquet = pq.ParquetFile(fh)
                for group in range(parquet.num_row_groups):
                    yield table, contract.conform(parquet.read_row_group(group))
