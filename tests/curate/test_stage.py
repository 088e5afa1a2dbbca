"""The stage end to end: streaming equals one batch, bounded state, row-count identity, real rows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

import schemas
from coa.agents.runtime import MultiAgentTeacher, TeacherConfig
from coa.curate.config import CurateConfig
from coa.curate.core import curate
from coa.curate.stats import CurationStats
from tests.agents.test_runtime import TASK, ScriptedBackend, happy_script, tools
from tests.curate.rows import (
    LONG_Q,
    bench_table,
    coa_check,
    no_gate,
    question,
    run,
    run_curate,
    score,
    table,
)

N_ROWS, N_BATCHES = 200, 20
OBS_CHARS = 20_000
BENCH = bench_table([("bench:1", question(10_001), ["Quillon Harbor Trust"])])


def _row(i: int) -> dict[str, Any]:
    """A mix of good runs and every kind of reject, with duplicates spread across batches."""
    filler = f"page {i} " + "lorem ipsum dolor " * (OBS_CHARS // 18)
    calls = [("web_search", f"q{i}", filler, None)]
    kind = i % 10
    if kind == 1:
        return run(f"r{i}", question(i), "Wrong", calls=calls)
    if kind == 2:  # exact copy of an earlier run (same task, same steps), possibly in another batch
        src = i - 37
        return run(
            f"r{i}",
            question(src),
            task_id=f"t:r{src}",
            calls=[
                ("web_search", f"q{src}", f"page {src} " + "lorem ipsum dolor " * (OBS_CHARS // 18), None)
            ],
        )
    if kind == 3:  # near duplicate of an earlier task
        return run(f"r{i}", question(i - 51).replace("holds", "keeps"), calls=calls)
    if kind == 4:
        return run(f"r{i}", question(i), None, status="step_limit", error="StepLimit: 12 steps", calls=calls)
    if kind == 5 and i % 20 == 5:
        return run(f"r{i}", "Context: " + question(10_001), gold=("x",), answer="x", calls=calls)
    if kind == 6:
        return run(f"r{i}", question(i), calls=calls * 3)  # repeated identical calls
    return run(f"r{i}", question(i), calls=calls)


class RowSink:
    """What the stage wrote, as Python rows per call."""

    def __init__(self) -> None:
        self.curated: list[list[dict[str, Any]]] = []
        self.quarantine: list[list[dict[str, Any]]] = []

    def kept(self) -> list[dict[str, Any]]:
        return [r for rows in self.curated for r in rows]

    def rejected(self) -> list[dict[str, Any]]:
        return [r for rows in self.quarantine for r in rows]


def _batches(n_batches: int, pulled: list[int]) -> Iterator[pa.Table]:
    per = N_ROWS // n_batches
    for b in range(n_batches):
        pulled.append(b)
        yield table([_row(i) for i in range(b * per, (b + 1) * per)])


def _config() -> CurateConfig:
    return CurateConfig.model_validate({"gate": {"step_chunk_rows": 1000}, "dedup": {"max_per_task": 1}})


def _curate(n_batches: int, out: Path) -> tuple[Any, Any, int]:
    """Run the stage; also return the peak Arrow memory (above the start) seen at each write."""
    pulled: list[int] = []
    base = pa.total_allocated_bytes()
    seen: list[int] = []
    sink = RowSink()

    def keep(into: list[list[dict[str, Any]]]) -> Any:
        def write(t: pa.Table) -> None:
            seen.append(pa.total_allocated_bytes() - base)
            into.append(t.to_pylist())  # kept as Python rows, so the sink holds no Arrow memory

        return write

    result = curate(
        _batches(n_batches, pulled),
        _config(),
        score,
        coa_check,
        {"bench": BENCH},
        None,
        keep(sink.curated),
        keep(sink.quarantine),
        str(out),
        source="test-input",
    )
    return result, sink, max(seen)


def _strip(summary: CurationStats) -> dict[str, Any]:
    out = summary.to_dict()  # the JSON summary.json holds, less what differs between two runs
    out.pop("created_at")
    out["gate"].pop("data_docs")
    return out


def test_twenty_batches_equal_one_batch_with_bounded_state(tmp_path: Path) -> None:
    many, many_sink, many_peak = _curate(N_BATCHES, tmp_path / "many")
    one, one_sink, one_peak = _curate(1, tmp_path / "one")

    # identical outcome
    assert many.rows_in == one.rows_in == N_ROWS
    assert many.rows_in == many.rows_kept + many.rows_quarantined
    assert len(many_sink.curated) == N_BATCHES and len(one_sink.curated) == 1
    assert many_sink.kept() == one_sink.kept()

    def quarantine(sink: Any) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "quarantined_at"} for r in sink.rejected()]

    assert quarantine(many_sink) == quarantine(one_sink)
    assert _strip(many.stats) == _strip(one.stats)
    assert many.gate_success and one.gate_success, many.failed_expectations
    reasons = many.reasons
    for code in (
        "incorrect",
        "exact_duplicate",
        "near_duplicate",
        "unclean_end:step_limit",
        "contaminated_question",
        "repeated_tool_calls",
    ):
        assert reasons.get(code, 0) > 0, (code, reasons)
    # step checks ran in several chunks and were merged
    assert many.stats.gate is not None
    steps = [c for c in many.stats.gate.checks if c.suite == "curate_steps"]
    assert steps and all(c.chunks is not None and c.chunks > 1 for c in steps)

    # bounded state: a few KB per run (hashes, LSH band entries, per-run numbers), while each run
    # carries more than 20 KB of observations
    assert many.peak_state_bytes / N_ROWS < 10_000
    assert many.peak_state_bytes < N_ROWS * OBS_CHARS / 2
    # streaming: Arrow memory in use while writing is about one batch, not the whole input
    assert many_peak < one_peak / 4, (many_peak, one_peak)


def test_batches_are_pulled_one_at_a_time(tmp_path: Path) -> None:
    pulled: list[int] = []
    seen_at_write: list[int] = []

    def batches() -> Iterator[pa.Table]:
        for b in range(5):
            pulled.append(b)
            yield table([run(f"b{b}r{i}", question(b * 10 + i)) for i in range(3)])

    def write(t: pa.Table) -> None:
        seen_at_write.append(len(pulled))

    res = curate(batches(), no_gate(), score, coa_check, {}, None, write, write, str(tmp_path))
    assert seen_at_write == [1, 2, 3, 4, 5]
    assert res.rows_in == 15 == res.rows_kept


def test_empty_input_fails_the_gate_with_min_rows(tmp_path: Path) -> None:
    res, sink = run_curate([schemas.TRAJECTORY.empty_table()], CurateConfig(), tmp_path)
    assert res.rows_in == res.rows_kept == res.rows_quarantined == 0
    assert not res.gate_success
    assert "min_rows" in {c.check for c in res.failed_expectations}
    assert Path(res.report_path).exists()


def test_a_real_runtime_trajectory_is_kept(tmp_path: Path) -> None:
    teacher = MultiAgentTeacher(ScriptedBackend(happy_script()), tools(), TeacherConfig(reflect_every=1))
    row = asyncio.run(teacher.solve(TASK))
    long = {**row, "run_id": "long", "task_id": "t:1", "question": LONG_Q}
    res, sink = run_curate([table([row, long])], no_gate(), tmp_path)
    assert res.rows_kept == 2, sink.rejected()
    assert [r["correct"] for r in sink.kept()] == [True, True]
