"""The curation core: raw ``trajectory.v1`` -> curated ``trajectory.v1`` + ``quarantine.v1`` + report.

:func:`curate` streams the input one batch at a time. For each batch it

1. conforms the batch to ``trajectory.v1`` and fills ``correct`` from the injected scorer;
2. runs the filters (:mod:`coa.curate.filters`, vectorised, then the injected CoA check on the
   survivors), decontamination against the benchmark index (:mod:`coa.curate.decontam`) and
   duplicate removal (:mod:`coa.curate.dedup`), in that order, on the runs still standing;
3. writes the kept runs and the quarantined ones (first failing reason, detail, row JSON) through
   the two callbacks, folds the batch into the statistics (:mod:`coa.curate.stats`) and hands
   the kept steps to the great-expectations gate (:mod:`coa.curate.expectations`).

Across batches only small state is kept in memory: dedup hashes and LSH tables, the benchmark
index (sized by the benchmarks) and fixed-size step aggregates; the few numbers per run wait in a
temporary file until the end. At the end the gate runs, Data Docs and the HTML report are written
into ``out_dir``, and ``rows_in == kept + quarantined`` is asserted. The stage never raises on a
failed gate; :meth:`CurateResult.raise_for_gate` does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from coa.curate.config import CurateConfig
from coa.curate.decontam import BenchmarkIndex
from coa.curate.dedup import Deduplicator, content_hashes
from coa.curate.expectations import Gate, steps_for_gate
from coa.curate.filters import (
    CoaCheck,
    CoaRender,
    Rejection,
    RowView,
    Score,
    check_coa,
    vector_checks,
    view_rows,
)
from coa.curate.frames import step_frame
from coa.curate.report import drift_rows, headline_markdown, render_report
from coa.curate.stats import CurationStats, GateCheck, GateRecord, StatsBuilder
from coa.curate.text import normalize_many
from coa.errors import CheckFailed
from coa.lazy import lazy_module
from coa.scoring.runs import fill_correct
from schemas.quarantine import QUARANTINE
from schemas.trajectory import TRAJECTORY

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

STAGE = "curate"
PAYLOAD_MAX_CHARS = 100_000
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"
DATA_DOCS_DIR = "data_docs"
STEP_FIELDS = ("agent", "role", "text", "tool_name", "tool_args", "observation", "error")


class CurateGateError(CheckFailed):
    """The data-quality gate failed; ``result`` holds the report and the failed expectations."""

    def __init__(self, result: CurateResult) -> None:
        self.result = result
        names = ", ".join(f"{c.suite}.{c.check}" for c in result.failed_expectations)
        super().__init__(
            f"curate gate failed ({names}); see the report {result.report_path}"
            + (f" and Data Docs {result.data_docs_path}" if result.data_docs_path else "")
        )


@dataclasses.dataclass(frozen=True)
class CurateResult:
    """What one curate run did, with the paths of its report and Data Docs."""

    rows_in: int
    rows_kept: int
    rows_quarantined: int
    reasons: dict[str, int]
    gate_success: bool
    failed_expectations: tuple[GateCheck, ...]
    report_path: str
    data_docs_path: str | None
    summary_path: str
    stats: CurationStats
    headline: str
    peak_state_bytes: int

    def raise_for_gate(self) -> None:
        """Raise :class:`CurateGateError` if the gate failed."""
        if not self.gate_success:
            raise CurateGateError(self)


def row_payloads(table: pa.Table) -> list[str]:
    """Each row of ``table`` as one JSON object (Polars' NDJSON writer, in Rust: UTF-8 kept,
    timestamps in ISO 8601), cut at :data:`PAYLOAD_MAX_CHARS`."""
    if table.num_rows == 0:
        return []
    frame = pl.DataFrame(pl.from_arrow(table))
    lines = frame.write_ndjson().split("\n")  # newlines inside strings are escaped
    if lines and lines[-1] == "":
        lines.pop()
    assert len(lines) == table.num_rows, (len(lines), table.num_rows)
    return [line[:PAYLOAD_MAX_CHARS] for line in lines]


def quarantine_table(
    table: pa.Table, rejected: list[tuple[int, Rejection]], source: str, at: dt.datetime
) -> pa.Table:
    """``quarantine.v1`` rows for the rejected runs of ``table`` (payload = the row as JSON)."""
    if not rejected:
        return QUARANTINE.empty_table()
    rows = table.take(pa.array([i for i, _ in rejected], pa.int64()))
    run_ids = rows.column("run_id").to_pylist()
    return QUARANTINE.from_rows(
        [
            {
                "stage": STAGE,
                "source": source,
                "row_key": str(run_id or f"row {i}"),
                "reason": rej.reason,
                "detail": rej.detail,
                "payload": payload,
                "quarantined_at": at,
            }
            for (i, rej), run_id, payload in zip(rejected, run_ids, row_payloads(rows), strict=True)
        ]
    )


def with_coa(table: pa.Table, renders: Sequence[CoaRender | None]) -> pa.Table:
    """``table`` with ``coa_variant`` and ``coa_text`` set from the CoA check's renderings (null where
    the check did not render the run): convert reads them instead of converting it again."""
    for name, values in (("coa_variant", [r.variant if r else None for r in renders]),
                         ("coa_text", [r.text if r else None for r in renders])):  # fmt: skip
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.string()))
    return table


class _Curator:
    """The per-batch logic and the small state carried across batches."""

    def __init__(
        self,
        config: CurateConfig,
        score: Score | None,
        coa_check: CoaCheck | None,
        benchmarks: Mapping[str, pa.Table],
        coa_row: RowView | None = None,
    ) -> None:
        if config.filters.require_valid_coa and coa_check is None:
            raise ValueError("filters.require_valid_coa is on but no coa_check was given")
        if config.decontam.benchmarks and not benchmarks:
            raise ValueError(
                "decontam.benchmarks lists artifacts but none were loaded: pass "
                "decontam.load_benchmarks(config.decontam.benchmarks) as benchmarks"
            )
        self.config = config
        self.score = score
        self.coa_check = coa_check
        self.coa_row = coa_row
        self.index = BenchmarkIndex(config.decontam, benchmarks)
        self.dedup = Deduplicator(config.dedup)

    def verdicts(self, table: pa.Table) -> tuple[pa.Table, list[Rejection | None], dict[int, CoaRender]]:
        """Score the batch and decide every run: None = kept, else why it is quarantined; and the
        CoA rendering of each run the CoA check converted (by row)."""
        cfg = self.config
        renders: dict[int, CoaRender] = {}
        score_errors: list[str | None] | None = None
        if self.score is not None:
            table, score_errors = fill_correct(table, self.score)
        verdicts = vector_checks(table, cfg.filters, score_errors)
        alive = [i for i, v in enumerate(verdicts) if v is None]
        if alive and cfg.filters.require_valid_coa:
            assert self.coa_check is not None
            pylist = view_rows(table.take(pa.array(alive, pa.int64())), self.coa_row)
            checked, rendered = check_coa(pylist, self.coa_check)
            for i, v, r in zip(alive, checked, rendered, strict=True):
                verdicts[i] = v
                if r is not None:
                    renders[i] = r
            alive = [i for i in alive if verdicts[i] is None]
        questions = normalize_many(table.column("question").to_pylist())
        if alive and len(self.index):
            sub = table.take(pa.array(alive, pa.int64()))
            for i, v in zip(alive, self.index.check(sub, [questions[i] for i in alive]), strict=True):
                verdicts[i] = v
            alive = [i for i in alive if verdicts[i] is None]
        if alive:
            sub = table.take(pa.array(alive, pa.int64()))
            hashes = content_hashes(sub) if cfg.dedup.exact else np.zeros(len(alive), np.uint64)
            task_ids = [str(t) for t in sub.column("task_id").to_pylist()]
            found = self.dedup.check_many(task_ids, [questions[i] for i in alive], hashes)
            for i, v in zip(alive, found, strict=True):
                verdicts[i] = v
        return table, verdicts, renders


def curate(
    batches: Iterable[pa.Table | pa.RecordBatch],
    config: CurateConfig,
    score: Score | None,
    coa_check: CoaCheck | None,
    benchmarks: Mapping[str, pa.Table],
    previous_stats: CurationStats | None,
    write_curated: Callable[[pa.Table], None],
    write_quarantine: Callable[[pa.Table], None],
    out_dir: str | os.PathLike[str],
    *,
    source: str = "trajectory",
    report_link: str | None = None,
    coa_row: RowView | None = None,
) -> CurateResult:
    """Curate raw trajectories batch by batch; see the module docstring.

    ``score`` fills ``correct`` (it returns None where it cannot score; ``score=None``: the
    batches come scored already and ``correct`` is taken as it is); ``coa_check`` returns None for a run that
    converts to a valid CoA trajectory, else the error (may be None when
    ``filters.require_valid_coa`` is off); ``benchmarks`` maps a benchmark name to a ``task.v1``
    table; ``previous_stats`` is the statistics of the previous run (drift); ``out_dir`` is a
    local folder that receives ``report.html``, ``summary.json`` and ``data_docs/``; ``source``
    is recorded in the quarantine rows; ``report_link`` is where the report will be read from
    (the committed artifact's URI; default: the local path in ``out_dir``); ``coa_row`` names
    the columns and step fields ``coa_check`` reads (default: it gets whole rows).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    curator = _Curator(config, score, coa_check, benchmarks, coa_row)
    builder = StatsBuilder()
    gate = Gate(config, out / DATA_DOCS_DIR) if config.gate.enabled else None
    rows_in = rows_kept = rows_quarantined = 0
    peak_state = 0
    for batch in batches:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        table = TRAJECTORY.conform(table)
        if table.num_rows == 0:
            continue
        table, verdicts, renders = curator.verdicts(table)
        kept = [i for i, v in enumerate(verdicts) if v is None]
        rejected = [(i, v) for i, v in enumerate(verdicts) if v is not None]
        if kept:
            write_curated(with_coa(table.take(pa.array(kept, pa.int64())), [renders.get(i) for i in kept]))
        if rejected:
            write_quarantine(quarantine_table(table, rejected, source, dt.datetime.now(dt.UTC)))
        rows_in += table.num_rows
        rows_kept += len(kept)
        rows_quarantined += len(rejected)
        steps = step_frame(table, STEP_FIELDS)
        _, kept_steps = builder.add_batch(table, [None if v is None else v.reason for v in verdicts], steps)
        if gate is not None:
            gate.add_steps(steps_for_gate(kept_steps))
        del table, steps, kept_steps
        peak_state = max(peak_state, curator.dedup.approx_bytes() + builder.approx_bytes())
    assert rows_in == rows_kept + rows_quarantined, (rows_in, rows_kept, rows_quarantined)
    curator.dedup.close()
    kept_tasks = curator.dedup.kept_tasks
    del curator  # the dedup state goes before the per-run numbers come back from disk

    runs = builder.runs()  # lazily, over the spill file: each check reads what it needs
    gate_info: GateRecord | None = None
    docs: str | None = None
    try:
        if gate is not None:
            result = gate.finish(runs.filter(pl.col("kept")), runs)
            docs = result.data_docs_index
            checks = tuple(GateCheck.from_dict(c) for c in result.checks)
            gate_info = GateRecord(success=result.success, checks=checks, data_docs=docs)
        stats = builder.stats(kept_tasks, gate_info)
    finally:
        builder.close()
    assert stats.rows_in == rows_in and stats.rows_kept == rows_kept
    drift = drift_rows(stats, previous_stats, config.drift_warn)
    stats = stats.model_copy(update={"drift": drift, "config": config.model_dump(mode="json")})

    report_path = out / REPORT_FILE
    href = os.path.relpath(docs, out) if docs else None
    report_path.write_text(
        render_report(stats, previous_stats, data_docs_href=href, drift_warn=config.drift_warn),
        encoding="utf-8",
    )
    summary_path = out / SUMMARY_FILE
    summary_path.write_text(json.dumps(stats.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
    failed = tuple(c for c in gate_info.checks if not c.success) if gate_info is not None else ()
    return CurateResult(
        rows_in=rows_in,
        rows_kept=rows_kept,
        rows_quarantined=rows_quarantined,
        reasons=dict(stats.reasons),
        gate_success=gate_info is None or gate_info.success,
        failed_expectations=failed,
        report_path=str(report_path),
        data_docs_path=docs,
        summary_path=str(summary_path),
        stats=stats,
        headline=headline_markdown(stats, report_link or str(report_path)),
        peak_state_bytes=peak_state,
    )
