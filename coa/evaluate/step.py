"""The evaluation steps: a model on task tables (→ ``eval`` artifact), and the training report.

* :func:`step`: run the model with real tools on ``tasks`` and on every benchmark the config names
  (``EvalConfig.benchmarks``: imported ``task.v1`` artifacts, each with its own limit and sample
  count) → ``eval`` (eval.v1) and ``metrics.json`` (per family and per benchmark); its key hashes
  the config, the tools, the task tables and the model (its artifact when the pipeline built it,
  else its name). Search and crawl run behind the leak guard (blocked benchmark hosts).
* :func:`report_step`: the HTML training report: the student before and after SFT beside the
  teacher's accuracy and token cost on the same held-out tasks.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

import schemas
from coa import io
from coa.errors import UserError
from coa.evaluate.config import EvalConfig
from coa.evaluate.metrics import metrics_document
from coa.evaluate.stage import EVAL_TABLE, METRICS_FILE, evaluate_tasks, open_generator, select_tasks
from coa.steps import Build, Step, StepInput, TableInput
from coa.tools.config import ToolsConfig, build_toolbox

BENCHMARK_INPUT = "benchmark{}"


def step(
    config: EvalConfig,
    tools: ToolsConfig,
    tasks: StepInput | None,
    model: StepInput,
    name: str = "evaluate",
) -> Step:
    """Evaluate ``model`` on ``tasks`` (may be None when the config names benchmarks) with ``tools``."""
    if tasks is None and not config.benchmarks:
        raise UserError("evaluate: no tasks (give a task table or name benchmarks in evaluate.benchmarks)")
    inputs: dict[str, StepInput | None] = {"tasks": tasks, "model": model}
    expects = {"tasks": "task.v1"}
    for i, spec in enumerate(config.benchmarks):
        ref = io.lookup(spec.uri)
        if ref is None:
            raise UserError(
                f"evaluate.benchmarks[{i}]: no committed artifact at {spec.uri} (coa tasks import)"
            )
        inputs[BENCHMARK_INPUT.format(i)] = TableInput(ref, spec.table)
        expects[BENCHMARK_INPUT.format(i)] = "task.v1"
    identity: dict[str, Any] = {"tools": tools.model_dump(mode="json")}
    if config.judge is not None:
        from coa.scoring.judge import judge_prompt

        identity["judge_prompt"] = judge_prompt()["version"]
    return Step(
        name=name,
        kind="eval",
        artifact=config.name,
        config=config,
        build=_build,
        inputs=inputs,
        identity=identity,
        describe="the model on the tasks with real tools",
        expects=expects,
        produces={EVAL_TABLE: "eval.v1"},
    )


def task_plan(b: Build, config: EvalConfig) -> tuple[pa.Table, list[int]]:
    """All tasks to run (the stage's table, then each benchmark's) and each one's sample count."""
    tables, counts = [], []
    main = b.optional("tasks")
    if isinstance(main, TableInput):
        table = main.read()
        tables.append(table)
        counts += [config.samples] * len(select_tasks(table, config))
    for i, spec in enumerate(config.benchmarks):
        table = b.table(BENCHMARK_INPUT.format(i)).read()
        if spec.limit is not None:
            table = _first_per_source(table, spec.limit)
        tables.append(table)
        counts += [spec.samples or config.samples] * len(select_tasks(table, config))
    return pa.concat_tables(tables, promote_options="default"), counts


def _first_per_source(table: pa.Table, limit: int) -> pa.Table:
    seen: dict[str, int] = {}
    keep = []
    for source in table.column("source").to_pylist():
        seen[source] = seen.get(source, 0) + 1
        keep.append(seen[source] <= limit)
    return table.filter(pa.array(keep))


def _build(b: Build) -> None:
    config: EvalConfig = b.step.config
    tools = ToolsConfig.model_validate(b.step.identity["tools"])
    model = b.model("model")
    tasks, counts = task_plan(b, config)
    generator = open_generator(config, model.local_path())
    root = b.store.root if "://" not in b.store.root else None
    toolbox = build_toolbox(tools, root, config.leak_guard.blocked_hosts)
    judge = None
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge, judge_prompt

        judge = LLMJudge(config.judge)
        b.writer.extra_lineage["judge"] = {"model": judge.model, "prompt_version": judge_prompt()["version"]}
    try:
        result = evaluate_tasks(tasks, generator, toolbox, config, b.progress, counts, judge)
    finally:
        close = getattr(generator, "close", None)
        if close is not None:
            close()
        if judge is not None:
            judge.close()
    document = metrics_document(result, config.prices)
    b.writer.write_table(EVAL_TABLE, result, schemas.EVAL)
    b.writer.write_file(METRICS_FILE, json.dumps(document, indent=2, sort_keys=True))
    b.writer.extra_lineage["model"] = model.name
    b.summary["metrics"] = document["families"]
    b.summary["benchmarks"] = document["benchmarks"]


def report_step(
    run_name: str,
    tasks: StepInput,
    before: StepInput,
    after: StepInput | None,
    sft: StepInput | None,
    teacher: StepInput | None,
    name: str = "report",
) -> Step:
    """The training report over the evaluations before/after SFT and the teacher's runs."""
    return Step(
        name=name,
        kind="report",
        artifact=run_name,
        config={"run_name": run_name},
        build=_build_report,
        inputs={"tasks": tasks, "before": before, "after": after, "sft": sft, "teacher": teacher},
        describe="HTML training report (before/after SFT vs the teacher)",
        expects={"tasks": "task.v1", "before": "eval.v1", "after": "eval.v1", "teacher": "trajectory.v1"},
    )


def _build_report(b: Build) -> None:
    from coa.evaluate.report import write_training_report

    b.summary["comparison"] = write_training_report(b)
    b.summary["report"] = io.join(b.writer.uri, "report.html")
