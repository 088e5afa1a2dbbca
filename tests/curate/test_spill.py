"""Frames spilled to disk come back whole and in order; the file is finished, then removed."""

from __future__ import annotations

import polars as pl
import pytest

from coa.curate.spill import FrameSpill


def test_frames_come_back_in_order_and_the_file_goes() -> None:
    spill = FrameSpill()
    parts = [
        pl.DataFrame({"id": [f"r{i}-{j}" for j in range(i + 1)], "n": list(range(i + 1))}) for i in range(4)
    ]
    for part in parts:
        spill.append(part)
    spill.append(parts[0].clear())  # an empty batch adds nothing
    assert spill.rows == 10 and spill.disk_bytes > 0
    scan = spill.scan()
    assert scan is not None
    assert scan.collect().equals(pl.concat(parts))
    with pytest.raises(RuntimeError, match="finished"):
        spill.append(parts[0])
    spill.close()
    assert spill.disk_bytes == 0 and not spill.path.parent.exists()
    spill.close()  # idempotent


def test_nothing_appended_scans_as_none() -> None:
    spill = FrameSpill()
    assert spill.scan() is None
    spill.close()


def test_a_dropped_spill_leaves_no_file() -> None:
    import gc

    spill = FrameSpill()
    spill.append(pl.DataFrame({"n": [1, 2]}))
    folder = spill.path.parent
    assert folder.exists()
    del spill
    gc.collect()
    assert not folder.exists()
