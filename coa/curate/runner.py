"""The curate stage on storage: read raw trajectories in batches, score them, curate, commit.

Scoring: QA/math answers through :func:`coa.scoring.score_answer`; code answers by running the
task's tests in the sandbox (:func:`coa.tools.code.run_tests`), looked up in the task table the
runs came from. The CoA check is :func:`coa.convert.coa.coa_check`. The artifact holds the curated
``trajectories``, the ``quarantine``, ``report.html``, ``summary.json`` (the next run's drift
baseline), ``task_stats.json`` (runs and correct runs per task, for RL difficulty selection) and
the great-expectations Data Docs. A failed gate still commits (so the report can be read) and then
raises; a rerun raises again instead of reusing a failed gate silently.
"""

from __future__ import annotations

import json
import posixpath
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

import schemas
from coa import io
from coa.convert.coa import coa_check
from coa.convert.stage import TASK_STATS
from coa.curate.config import CurateConfig
from coa.curate.decontam import load_benchmarks
from coa.curate.stage import CurateGateError, CurateResult, curate
from coa.scoring import ScoringError, score_answer
from coa.tools.code import io_tests, run_tests
from coa.tools.sandbox import SandboxConfig


def make_scorer(judge: Any = None) -> Any:
    """The curate scorer: QA/math by rule, web through the judge when given; code is scored before."""

    def score(prediction: str | None, golds: list[str], family: str) -> bool | None:
        if family == "code" or not golds:
            return None  # code runs are scored from their tests (see _score_code)
        try:
            return score_answer(prediction, golds, family, judge=judge if family == "web" else None).correct
        except (ScoringError, ImportError):
            return None

    return score


SCORING_WORKERS = 4
"""Code runs scored at once (each in its own sandbox)."""


def tests_of(case: dict[str, Any]) -> list[Any]:
    if case["kind"] == "functional":
        return [case["functional"]]
    return list(io_tests(case["stdin"], case["expected_output"]))


def _score_code(batch: pa.Table, tests: dict[str, dict[str, Any]], sandbox: SandboxConfig) -> pa.Table:
    """Fill ``correct`` of code runs by running the task's tests on the final answer's program."""
    correct = batch.column("correct").to_pylist()
    families = batch.column("family").to_pylist()
    answers = batch.column("final_answer").to_pylist()
    task_ids = batch.column("task_id").to_pylist()
    todo: dict[int, tuple[str, list[Any]]] = {}
    for i, (family, answer, task_id) in enumerate(zip(families, answers, task_ids, strict=True)):
        if family != "code" or task_id not in tests:
            continue
        if not answer:
            correct[i] = False
            continue
        todo[i] = (answer, tests_of(tests[task_id]))
    # Sandboxed runs wait on process start-up far more than on CPU: several at once.
    with ThreadPoolExecutor(max_workers=SCORING_WORKERS) as pool:
        reports = pool.map(
            lambda job: run_tests(job[0], job[1], config=sandbox, fail_fast=True), todo.values()
        )
        for i, report in zip(todo, reports, strict=True):
            correct[i] = report.all_passed
    index = batch.schema.get_field_index("correct")
    return batch.set_column(index, "correct", pa.array(correct, pa.bool_()))


def score_runs(runs: pa.Table, tasks: io.ArtifactRef, tasks_table: str, judge: Any = None) -> pa.Table:
    """``runs`` (trajectory.v1) with ``correct`` filled exactly as curation scores them.

    Code runs by the task's tests in the sandbox, math/QA by rule, web through ``judge`` if given.
    """
    from coa.curate.filters import fill_correct

    task_rows = io.read_table(tasks, tasks_table, columns=["task_id", "family", "test_cases"]).to_pylist()
    tests = {t["task_id"]: t["test_cases"] for t in task_rows if t["family"] == "code" and t["test_cases"]}
    scored = _score_code(runs, tests, SandboxConfig(cpu_seconds=5, wall_seconds=10))
    return fill_correct(scored, make_scorer(judge))[0]


def previous_summary(store: io.Store, name: str, exclude: str) -> dict[str, Any] | None:
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
    return json.loads(io.read_file(best[1], "summary.json")) if best else None


def run_curate_stage(
    config: CurateConfig, raw: io.ArtifactRef, tasks: io.ArtifactRef, tasks_table: str, store: io.Store
) -> tuple[io.ArtifactRef, CurateResult | None]:
    """Curate ``raw`` into a committed artifact; raises :class:`CurateGateError` on a failed gate."""
    writer = store.writer("curated", config.name, config.model_dump(mode="json"), upstream=[raw, tasks])
    existing = writer.existing()
    if existing is not None:
        gate = io.read_lineage(existing).get("gate", {})
        if not gate.get("success", True):
            raise RuntimeError(
                f"curate gate failed for {existing.uri} ({gate.get('failed')}); see its report.html"
            )
        return existing, None
    task_rows = io.read_table(tasks, tasks_table, columns=["task_id", "family", "test_cases"]).to_pylist()
    tests = {t["task_id"]: t["test_cases"] for t in task_rows if t["family"] == "code" and t["test_cases"]}
    sandbox = SandboxConfig(cpu_seconds=5, wall_seconds=10)
    stats: dict[str, list[int]] = {}

    def batches() -> Iterator[pa.Table]:
        for batch in io.iter_batches(raw, batch_rows=config.batch_rows):
            batch = _score_code(batch, tests, sandbox)
            yield batch

    def record(table: pa.Table) -> None:
        for task_id, ok in zip(
            table.column("task_id").to_pylist(), table.column("correct").to_pylist(), strict=True
        ):
            entry = stats.setdefault(task_id, [0, 0])
            entry[0] += 1
            entry[1] += int(bool(ok))

    def scored_batches() -> Iterator[pa.Table]:
        from coa.curate.filters import fill_correct

        for batch in batches():
            filled, _ = fill_correct(batch, _score)
            record(filled)
            yield filled

    judge = None
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge

        judge = LLMJudge(config.judge)
    _score = make_scorer(judge)
    benchmarks = load_benchmarks(config.decontam.benchmarks)
    previous = previous_summary(store, config.name, writer.uri)
    with tempfile.TemporaryDirectory(prefix="coa-curate-") as out_dir:
        with (
            writer.table_writer("trajectories", schemas.TRAJECTORY) as write_curated,
            writer.table_writer("quarantine", schemas.QUARANTINE) as write_quarantine,
        ):
            result = curate(
                scored_batches(),
                config,
                lambda *_: None,  # already scored in scored_batches(); None keeps those values
                coa_check,
                benchmarks,
                previous,
                write_curated,
                write_quarantine,
                out_dir,
                source=raw.uri,
            )
        for path in sorted(Path(out_dir).rglob("*")):
            if path.is_file():
                writer.write_file(path.relative_to(out_dir).as_posix(), path.read_bytes())
        writer.write_file(TASK_STATS, json.dumps(stats, sort_keys=True))
    if judge is not None:
        judge.close()
    writer.extra_lineage["gate"] = {
        "success": result.gate_success,
        "failed": [f"{c['suite']}.{c['check']}" for c in result.failed_expectations],
    }
    writer.extra_lineage["counts"] = {
        "in": result.rows_in,
        "kept": result.rows_kept,
        "reasons": result.reasons,
    }
    ref = writer.commit()
    if not result.gate_success:
        raise CurateGateError(result)
    return ref, result


def report_uri(ref: io.ArtifactRef) -> str:
    return io.join(ref.uri, "report.html")


__all__ = ["TASK_STATS", "previous_summary", "report_uri", "run_curate_stage"]
