"""The evaluation step: an ``eval`` artifact from a model and a task table, reused on a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import schemas
from coa import io
from coa.evaluate import EvalConfig
from coa.evaluate import step as eval_step
from coa.steps import ModelInput, TableInput, run_step
from coa.tools.config import ToolsConfig

from .test_stage import task, tasks_table, tiny_model  # noqa: F401 (fixture)


def test_step_commits_an_eval_artifact_and_reuses_it(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("tasks", "unit", {"n": 2})
    writer.write_table(
        "heldout", tasks_table(task(0, "What is 1 + 1?"), task(1, "Who?", family="mhqa")), schemas.TASK
    )
    tasks_ref = writer.commit()
    config = EvalConfig(max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief")
    tools = ToolsConfig(enabled=("code", "web_search"), record="off")
    step = eval_step.step(
        config, tools, TableInput(tasks_ref, "heldout"), ModelInput(external=str(tiny_model))
    )
    built = run_step(step, store)
    ref, metrics = built.ref, built.summary["metrics"]
    assert ref.kind == "eval" and ref.rows("eval") == 2 and not built.reused
    document = json.loads(io.read_file(ref, "metrics.json"))
    assert document["families"] == metrics and document["benchmarks"] == built.summary["benchmarks"]
    assert set(metrics) == {"math", "mhqa", "all"} and metrics["all"]["n"] == 2
    assert io.read_lineage(ref)["model"] == str(tiny_model)
    again = run_step(step, store)
    assert again.reused and again.ref.uri == ref.uri and again.summary["metrics"] == metrics
