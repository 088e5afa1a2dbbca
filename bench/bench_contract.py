"""Benchmark: cost of the contract check on reads, as a ratio against a raw Parquet read.

Writes a trajectory.v1 table (nested steps) through the store, then times, in the same process,
``pq.read_table`` of the same file (baseline) and ``coa.io.read_table`` (read + manifest + the
contract's conform). Prints the ratio; run with ``python bench/bench_contract.py [--rows N] [--json F]``.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from harness import Bench, main

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


def run(args, bench: Bench) -> None:
    rows = 2_000 if args.quick else args.rows
    table = build(rows)
    with tempfile.TemporaryDirectory() as root:
        store = io.Store(root)
        writer = store.writer("trajectories", "bench", {"rows": rows})
        writer.write_table("trajectories", table, schemas.TRAJECTORY)
        ref = writer.commit()
        path = Path(ref.uri) / "trajectories.parquet"
        raw = bench.time("raw read (pq.read_table)", lambda: pq.read_table(path), repeat=args.repeat)
        checked = bench.time("checked read (coa.io.read_table)", lambda: io.read_table(ref), args.repeat)
    bench.figure("rows", rows)
    bench.ratio("checked / raw", checked, raw)


if __name__ == "__main__":
    main(run, __doc__, extra=lambda p: p.add_argument("--rows", type=int, default=50_000))
