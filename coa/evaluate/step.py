"""The evaluation steps: a model on a task table (→ ``eval`` artifact), and the training report.

* :func:`step`: run the model with real tools on ``tasks`` → ``eval`` (eval.v1) and
  ``metrics.json``; its key hashes the config, the tools, the task table and the model (its artifact
  when the pipeline built it, else its name).
* :func:`report_step`: the HTML training report: the student before and after SFT beside the
  teacher's accuracy and token cost on the same held-out tasks.
"""

from __future__ import annotations

import json

import schemas
from coa import io
from coa.evaluate.config import EvalConfig
from coa.evaluate.metrics import eval_metrics
from coa.evaluate.stage import EVAL_TABLE, METRICS_FILE, evaluate_tasks, open_generator
from coa.steps import Build, Step, StepInput
from coa.tools.config import ToolsConfig, build_toolbox


def step(
    config: EvalConfig, tools: ToolsConfig, tasks: StepInput, model: StepInput, name: str = "evaluate"
) -> Step:
    """Evaluate ``model`` on ``tasks`` with ``tools``."""
    return Step(
        name=name,
        kind="eval",
        artifact=config.name,
        config=config,
        build=_build,
        inputs={"tasks": tasks, "model": model},
        identity={"tools": tools.model_dump(mode="json")},
        describe="the model on the tasks with real tools",
        expects={"tasks": "task.v1"},
        produces={EVAL_TABLE: "eval.v1"},
    )


def _build(b: Build) -> None:
    config: EvalConfig = b.step.config
    tools = ToolsConfig.model_validate(b.step.identity["tools"])
    model = b.model("model")
    generator = open_generator(config, model.local_path())
    toolbox = build_toolbox(tools, b.store.root if "://" not in b.store.root else None)
    try:
        result = evaluate_tasks(b.table("tasks").read(), generator, toolbox, config, b.progress)
    finally:
        close = getattr(generator, "close", None)
        if close is not None:
            close()
    metrics = eval_metrics(result)
    b.writer.write_table(EVAL_TABLE, result, schemas.EVAL)
    b.writer.write_file(METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=True))
    b.writer.extra_lineage["model"] = model.name
    b.summary["metrics"] = metrics


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
