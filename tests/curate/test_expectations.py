"""The gate's run suite validated in parts by a hash of the run id gives the whole frame's verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from coa.curate.config import CurateConfig
from coa.curate.expectations import Gate

N = 3000


def _runs(duplicated: tuple[int, ...] = (), too_long: tuple[int, ...] = ()) -> pl.DataFrame:
    ids = [f"run-{i}" for i in range(N)]
    for i in duplicated:  # the id of run i again, far from run i
        ids[N - 1 - i] = ids[i]
    return pl.DataFrame(
        {
            "run_id": ids,
            "family": ["math", "code", "web"] * (N // 3),
            "status": ["completed"] * N,
            "n_steps": [3 + i % 5 for i in range(N)],
            "n_tool_calls": [i % 3 for i in range(N)],
            "tokens": [100 + i for i in range(N)],
            "answer_chars": [20_000 if i in too_long else 5 for i in range(N)],
            "correct": [i % 4 != 0 for i in range(N)],
        }
    )


def _verdicts(
    runs: pl.DataFrame | pl.LazyFrame, chunk_rows: int, tmp: Path, floor: float = 0.5
) -> dict[str, Any]:
    cfg = CurateConfig.model_validate(
        {"gate": {"run_chunk_rows": chunk_rows, "correctness_floor": floor, "correctness_scope": "curated"}}
    )
    result = Gate(cfg, tmp).finish(runs, runs.select("correct"))
    return {
        c["check"]: (c["success"], c["element_count"], c["unexpected_count"], sorted(c["partial_unexpected"]))
        for c in result.checks
        if c["suite"] in ("curate_runs", "curate_totals")
    } | {"chunks": max(c.get("chunks", 1) for c in result.checks if c["suite"] == "curate_runs")}


def test_run_parts_find_what_the_whole_frame_finds(tmp_path: Path) -> None:
    runs = _runs(duplicated=(7, 1200), too_long=(5, 2999))
    whole = _verdicts(runs, N, tmp_path / "whole")
    parts = _verdicts(runs, 1000, tmp_path / "parts")
    assert whole.pop("chunks") == 1 and parts.pop("chunks") == 3
    assert parts == whole
    # as curate passes them: lazily over a Parquet file, one part collected at a time
    runs.write_parquet(tmp_path / "runs.parquet")
    lazy = _verdicts(pl.scan_parquet(tmp_path / "runs.parquet"), 1000, tmp_path / "lazy")
    assert lazy.pop("chunks") == 3 and lazy == whole
    assert whole["ids_unique"] == (False, N, 4, ["run-1200", "run-7"])
    assert whole["answer_length_in_range"][:3] == (False, N, 2)
    assert whole["min_rows"][0] and whole["steps_in_range"][0] and whole["ids_present"][0]
    # the correctness floor is over the whole column (3 in 4 correct), not a part's
    assert whole["correctness_floor"][0]
    assert not _verdicts(runs, 1000, tmp_path / "high", floor=0.8)["correctness_floor"][0]


def test_a_clean_frame_passes_in_parts(tmp_path: Path) -> None:
    checks = _verdicts(_runs(), 1000, tmp_path)
    assert checks.pop("chunks") == 3
    assert all(ok for ok, *_ in checks.values()), checks
