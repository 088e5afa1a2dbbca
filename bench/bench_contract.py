"""Benchmark: cost of the contract check on reads, as a ratio against a raw Parquet read.

Writes a trajectory.v1 table (nested steps) through the store, then times, in the same process,
``pq.read_table`` of the same file (baseline) and ``coa.io.read_table`` (read + manifest + the
contract's conform). Prints the ratio; run with ``python bench/bench_contract.py [rows]``.
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

import schemas
from coa import io


def build(rows: int):
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    step = {
        "index": 0,
        "agent": "search_agent",
        "role": "tool_call",
        "text": "t" * 200,
        "tool_name": "web_search",
        "tool_args": '{"query": "q"}',
        "observation": "o" * 800,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "latency_s": 0.5,
        "started_at": t0,
    }
    base = {
        "task_id": "s:0",
        "family": "web",
        "question": "q" * 100,
        "gold_answers": ["a"],
        "teacher": "t",
        "teacher_config": "{}",
        "sample_index": 0,
        "steps": [step] * 6,
        "final_answer": "a",
        "correct": True,
        "status": "completed",
        "n_steps": 6,
        "n_tool_calls": 6,
        "prompt_tokens": 600,
        "completion_tokens": 120,
        "latency_s": 3.0,
        "started_at": t0,
        "finished_at": t0,
    }
    return schemas.TRAJECTORY.from_rows([{**base, "run_id": f"r{i}"} for i in range(rows)])


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    table = build(rows)
    with tempfile.TemporaryDirectory() as root:
        store = io.Store(root)
        writer = store.writer("trajectories", "bench", {"rows": rows})
        writer.write_table("trajectories", table, schemas.TRAJECTORY)
        ref = writer.commit()
        path = Path(ref.uri) / "trajectories.parquet"
        raw = best_of(lambda: pq.read_table(path))
        checked = best_of(lambda: io.read_table(ref))
    ratio = checked / raw
    print(f"rows={rows} raw_read={raw * 1000:.1f}ms checked_read={checked * 1000:.1f}ms ratio={ratio:.2f}x")


if __name__ == "__main__":
    main()
