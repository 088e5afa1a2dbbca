"""The curation step: raw trajectories → curated ``trajectory.v1`` + quarantine + report, committed.

The raw input is a collection's ``trajectory.v1`` table or an RL artifact's ``rollout.v1`` table
(rejection-sampled trajectories for the next SFT round: its correct, format-valid rows become
native CoA runs, :mod:`coa.curate.rollouts`; the counts are in the lineage's ``rollouts``). An
optional ``student`` input (a sampling step's ``rollouts``, :mod:`coa.sample`) adds the student's
correct, format-valid attempts after the teacher's runs (``teacher``: ``student-r<round>``; counts
in the lineage's ``student``), for the next SFT round.

Batches are read from storage, code runs scored in the sandbox and answers by rule
(:mod:`coa.scoring.runs`), then curated by :func:`coa.curate.core.curate`. Given an executor
(``execution.engine: ray``), the scoring of ``trajectory.v1`` runs happens in shards
(:mod:`coa.curate.shards`) and the curation reads their scored batches back in table order: the
same batches, so the same artifact (an RL artifact's rollouts are adapted and scored here).

The artifact holds the curated ``trajectories``, the ``quarantine``, ``report.html``,
``summary.json`` (the next run's drift baseline), the ``task_stats`` table (``task_stats.v1``: runs
and correct runs per task, for RL difficulty selection) and the great-expectations Data Docs. A
failed gate still commits (so the report can be read) and the step fails with the gate's verdict,
the same message on every rerun.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

import schemas
from coa import io
from coa.curate.config import CurateConfig
from coa.curate.core import REPORT_FILE, curate
from coa.curate.decontam import load_benchmarks
from coa.curate.filters import RowView
from coa.curate.rollouts import RolloutRuns
from coa.curate.shards import scored_batches as sharded_scoring
from coa.curate.stats import CurationStats
from coa.curate.task_stats import TaskStats
from coa.format.from_run import coa_check
from coa.scoring.runs import answer_scorer, code_tests, fill_correct, score_code
from coa.steps import Build, Stage, Step, StepInput, StepSummary, TableInput


class CurateSummary(StepSummary):
    """What a curation step did, as its lineage records it (the runner stores it as JSON; readers
    parse it with :meth:`from_dict`: keys an older artifact did not store take their defaults, keys
    this version no longer reads are ignored)."""

    rows_in: int = Field(description="Runs read.")
    rows_kept: int = Field(description="Runs kept (the curated table).")
    rows_quarantined: int = Field(description="Runs set aside, each with its reasons.")
    reasons: dict[str, int] = Field(default_factory=dict, description="Quarantine reason -> runs.")
    gate_success: bool = Field(default=True, description="Whether every gating expectation held.")
    failed_expectations: tuple[str, ...] = Field(default=(), description="``suite.check`` of each failure.")
    headline: str = Field(default="", description="The report's headline (markdown).")
    report: str | None = Field(default=None, description="The committed data-quality report's URI.")
    rollouts: dict[str, int] | None = Field(
        default=None, description="With RL rollouts as input: rollouts read, and why each was left out."
    )
    student: dict[str, int] | None = Field(
        default=None,
        description="With a sampling step's rollouts beside the teacher's runs: rollouts read, why each was "
        "left out, and how many were selected.",
    )


COA_CHECK_ROW = RowView(
    columns=("run_id", "family", "final_answer", "teacher_config", "steps"),
    step_fields=("role", "text", "tool_name", "tool_args", "observation", "fields"),
)
"""What :func:`coa.format.from_run.coa_check` reads of a run (tests/curate/test_filters.py checks
it against whole rows): the check gets only these, not timestamps and token counts (``teacher_config``:
the variant a native CoA run records, :mod:`coa.curate.rollouts`)."""

TASK_STATS_TABLE = "task_stats"
"""Table of a curate artifact (``task_stats.v1``): runs and correct runs per task (convert reads it)."""
TASK_STATS_JSON = "task_stats.json"
"""What artifacts before ``task_stats.v1`` hold instead: ``{task_id: [runs, correct runs]}``."""


def step(
    config: CurateConfig,
    raw: StepInput,
    tasks: StepInput,
    name: str = "curate",
    student: StepInput | None = None,
) -> Step:
    """Curate the runs of ``raw`` (which solved the tasks of ``tasks``), and with ``student`` (a
    sampling step's ``rollouts``, rollout.v1) the student's correct attempts beside them."""
    inputs: dict[str, StepInput | None] = {"raw": raw, "tasks": tasks}
    if student is not None:  # only then, so a plan without rounds keeps its content key
        inputs["student"] = student
    beside = "; the teacher's runs beside the student's correct samples" if student is not None else ""
    return STAGE.step(config, inputs, name=name, describe=STAGE.describe + beside)


def report_uri(ref: io.ArtifactRef) -> str:
    return io.join(ref.uri, REPORT_FILE)


def previous_stats(store: io.Store, name: str, exclude: str) -> CurationStats | None:
    """The summary of the most recent other committed curate artifact with this name."""
    fs, root = io.filesystem(posixpath.join(store.root, "curated"))
    if not fs.exists(root):
        return None
    best: tuple[str, str] | None = None
    for folder in fs.ls(root, detail=False):
        uri = folder if "://" not in store.root else f"{store.root.split('://')[0]}://{folder}"
        if not posixpath.basename(folder).startswith(f"{name}-") or uri.rstrip("/") == exclude.rstrip("/"):
            continue
        ref = io.lookup(uri)
        if ref is None or "summary.json" not in ref.files:
            continue
        created = io.read_lineage(ref)["created_at"]
        if best is None or created > best[0]:
            best = (created, ref.uri)
    return CurationStats.from_dict(json.loads(io.read_file(best[1], "summary.json"))) if best else None


def rollout_runs(b: Build, table: TableInput) -> RolloutRuns:
    """The adapter of a ``rollout.v1`` input: an RL artifact's rollouts (``rl-policy``) or a sampling
    step's (``student-r<round>``, the round its lineage's ``sampled`` names)."""
    lineage = io.read_lineage(table.ref)
    created = dt.datetime.fromisoformat(lineage["created_at"])
    task_table = b.table("tasks").read(["task_id", "family", "question", "gold_answers", "test_cases"])
    tasks = {t["task_id"]: t for t in task_table.to_pylist()}
    sampled = lineage.get("sampled")
    if sampled is None:
        return RolloutRuns(tasks, table.uri, created)
    return RolloutRuns(tasks, table.uri, created, f"student-r{sampled['round']}", int(sampled["round"]))


def _build(b: Build) -> None:
    config: CurateConfig = b.step.config
    raw = b.table("raw")
    # only the code tasks' tests stay in memory while the runs stream (not the whole task table)
    tests = code_tests(b.table("tasks").read(["task_id", "family", "test_cases"]))
    adapt = None
    if raw.ref.tables[raw.table].schema_id == schemas.ROLLOUT.id:
        adapt = rollout_runs(b, raw)
    sampled = b.table("student") if b.optional("student") is not None else None
    student = rollout_runs(b, sampled) if sampled is not None else None
    judge = None
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge

        judge = LLMJudge(config.judge)
    score = answer_scorer(judge)
    stats = TaskStats()

    scratch = b.store.checkpoint_uri(b.writer.uri)

    sharded = b.executor is not None and adapt is None  # RL rollouts are scored already: no shards

    def scored_batches() -> Iterator[pa.Table]:
        if sharded and b.executor is not None:  # scoring in shards on the executor (engine: ray)
            for batch in sharded_scoring(
                b.executor, raw, b.table("tasks"), config.judge, config.batch_rows, scratch
            ):
                stats.add(batch)
                yield batch
        sources: list[tuple[TableInput, RolloutRuns | None]] = [] if sharded else [(raw, adapt)]
        if sampled is not None:
            sources.append((sampled, student))
        for table, adapter in sources:
            for batch in io.iter_batches(table.ref, table.table, batch_rows=config.batch_rows):
                if adapter is not None:
                    batch = adapter(batch)
                filled, _ = fill_correct(score_code(batch, tests), score)
                stats.add(filled)
                yield filled

    benchmarks = load_benchmarks(config.decontam.benchmarks)
    previous = previous_stats(b.store, config.name, b.writer.uri)
    committed_report = io.join(b.writer.uri, REPORT_FILE)
    try:
        with tempfile.TemporaryDirectory(prefix="coa-curate-") as out_dir:
            with (
                b.writer.table_writer("trajectories", schemas.TRAJECTORY) as write_curated,
                b.writer.table_writer("quarantine", schemas.QUARANTINE) as write_quarantine,
            ):
                result = curate(
                    scored_batches(),
                    config,
                    None,  # already scored in scored_batches()
                    coa_check,
                    benchmarks,
                    previous,
                    write_curated,
                    write_quarantine,
                    out_dir,
                    source=raw.uri,
                    report_link=committed_report,
                    coa_row=COA_CHECK_ROW,
                )
            for path in sorted(Path(out_dir).rglob("*")):
                if path.is_file():
                    b.writer.write_file(path.relative_to(out_dir).as_posix(), path.read_bytes())
            with b.writer.table_writer(TASK_STATS_TABLE, schemas.TASK_STATS) as write_stats:
                for part in stats.tables():
                    write_stats(part)
    finally:
        stats.close()
        if judge is not None:
            judge.close()
    if sharded:
        fs, folder = io.filesystem(scratch)
        b.cleanup.append(lambda: fs.rm(folder, recursive=True) if fs.exists(folder) else None)
    failed = [f"{c.suite}.{c.check}" for c in result.failed_expectations]
    b.writer.extra_lineage["gate"] = {"success": result.gate_success, "failed": failed}
    if adapt is not None:
        b.writer.extra_lineage["rollouts"] = adapt.counts
    if student is not None:
        b.writer.extra_lineage["student"] = {
            "source": student.source,
            "round": student.round,
        } | student.counts
    b.writer.extra_lineage["counts"] = {
        "in": result.rows_in,
        "kept": result.rows_kept,
        "reasons": result.reasons,
    }
    inputs: dict[str, Any] = {}  # set only for rollout inputs (RL's, a sampling step's)
    if adapt is not None:
        inputs["rollouts"] = adapt.counts
    if student is not None:
        inputs["student"] = student.counts
    b.report(
        CurateSummary(
            rows_in=result.rows_in,
            rows_kept=result.rows_kept,
            rows_quarantined=result.rows_quarantined,
            reasons=result.reasons,
            gate_success=result.gate_success,
            failed_expectations=tuple(failed),
            headline=result.headline,
            report=committed_report,
            **inputs,
        )
    )
    if not result.gate_success:
        b.fail(f"curation gate failed ({', '.join(failed)}); see the report {committed_report}")


STAGE = Stage(
    name="curate",
    kind="curated",
    build=_build,
    config=CurateConfig,
    expects={"raw": ("trajectory.v1", "rollout.v1"), "tasks": "task.v1", "student": schemas.ROLLOUT.id},
    produces={
        "trajectories": "trajectory.v1",
        "quarantine": "quarantine.v1",
        TASK_STATS_TABLE: schemas.TASK_STATS.id,
    },
    summary=CurateSummary,
    describe="filter, dedup, decontaminate, gate; data-quality report",
)
