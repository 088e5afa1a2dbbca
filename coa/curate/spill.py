"""Per-batch frames kept on disk until the end of a run, not in memory.

Curation folds every input run into a few numbers (the summary's per-run frame, the runs and
correct runs per task). Held in memory they grow with the input (~0.1 KB a run, and their merges
need as much again); :class:`FrameSpill` appends each batch's frame to a temporary Parquet file
instead and reads them back at the end, when the batch loop's state is gone (lazily: each query
reads the columns and rows it needs).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")


class FrameSpill:
    """Frames of one schema appended to a temporary Parquet file (one row group each)."""

    def __init__(self, prefix: str = "coa-spill-") -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=prefix))
        # the folder goes when the spill is closed or collected, whichever comes first
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self.path = self._dir / "frames.parquet"
        self._writer: pq.ParquetWriter | None = None
        self._finished = False
        self.rows = 0

    def append(self, frame: pl.DataFrame) -> None:
        """Write ``frame`` (every frame must have the first one's schema)."""
        if self._finished:
            raise RuntimeError("FrameSpill.append after scan(): the spill file is finished")
        if frame.is_empty():
            return
        table = frame.to_arrow()
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self._writer.write_table(table)
        self.rows += frame.height

    def scan(self) -> pl.LazyFrame | None:
        """Everything appended so far, lazily (None when nothing was): the file is finished first,
        so appending afterwards is an error."""
        self._finished = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return pl.scan_parquet(self.path) if self.path.exists() else None

    @property
    def disk_bytes(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def close(self) -> None:
        """Remove the file (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._cleanup()
