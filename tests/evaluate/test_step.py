"""The evaluation step: an ``eval`` artifact from a model and a task table, reused on a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import schemas
from coa import io
from coa.evaluate import step as eval_step
from coa.evaluate.config import EvalConfig
from coa.steps import ModelInput, TableInput, run_step
from coa.synthetic import encyclopedia_table
from coa.tools.config import ToolsConfig

from .test_stage import task, tasks_table, tiny_model  # noqa: F401 (fixture)


def test_step_commits_an_eval_artifact_and_reuses_it(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("tasks", "unit", {"n": 2})
    writer.write_table(
        "heldout", tasks_table(task(0, "What is 1 + 1?"), task(1, "Who?", family="mhqa")), schemas.TASK
    )
    writer.write_table("encyclopedia", encyclopedia_table(0, 60), schemas.DOCUMENT)  # what the search serves
    tasks_ref = writer.commit()
    config = EvalConfig(max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief")
    tools = ToolsConfig(enabled=("code", "web_search"), record="off")
    pages = TableInput(tasks_ref, "encyclopedia")
    step = eval_step.step(
        config,
        tools,
        TableInput(tasks_ref, "heldout"),
        ModelInput(external=str(tiny_model)),
        encyclopedia=pages,
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


def test_benchmarks_named_in_the_config_with_their_limits_and_samples(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from coa.evaluate.config import BenchmarkSpec
    from coa.tasksets import TasksConfig
    from coa.tasksets import step as tasksets
    from coa.tasksets.config import TaskSourceConfig
    from tests.conftest import FIXTURES

    store = io.Store(str(tmp_path / "store"))
    sources = tuple(TaskSourceConfig(path=str(FIXTURES / f)) for f in ("aime24.parquet", "math500.parquet"))
    imported = run_step(tasksets.step(TasksConfig(name="bench", sources=sources)), store).ref
    config = EvalConfig(
        max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief",
        benchmarks=(BenchmarkSpec(uri=imported.uri, limit=2, samples=3),),
    )  # fmt: skip
    tools = ToolsConfig(enabled=("code",), record="off")
    built = run_step(eval_step.step(config, tools, None, ModelInput(external=str(tiny_model))), store)
    rows = io.read_table(built.ref, "eval").to_pylist()
    per_bench: dict[str, set[str]] = {}
    for r in rows:
        per_bench.setdefault(r["benchmark"], set()).add(r["task_id"])
    assert {b: len(t) for b, t in per_bench.items()} == {"aime24": 2, "math500": 2} and len(rows) == 12
    assert (
        built.summary["benchmarks"]["aime24"]["samples"] == 3
        and "pass@2" in built.summary["benchmarks"]["all"]
    )
    assert "report.html" in built.ref.files and "pass@1" in built.summary["headline"]


def test_a_dead_search_endpoint_fails_the_evaluation_before_its_first_task(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    import socket
    import time

    import pytest

    from coa.llm.preflight import EndpointUnusable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("tasks", "unit", {"n": 1})
    writer.write_table("heldout", tasks_table(task(0, "Who?", family="mhqa")), schemas.TASK)
    tasks_ref = writer.commit()
    wiki = {
        "provider": "retrieve",
        "retrieve": {"url": f"http://127.0.0.1:{port}/retrieve", "max_retries": 5},
    }
    tools = ToolsConfig.model_validate({"enabled": ["wiki_search"], "record": "off", "wiki": wiki})
    config = EvalConfig(max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief")
    step = eval_step.step(
        config, tools, TableInput(tasks_ref, "heldout"), ModelInput(external=str(tiny_model))
    )
    t0 = time.monotonic()
    with pytest.raises(
        EndpointUnusable, match=r"retrieve search endpoint .* fix evaluate\.tools\.wiki\.retrieve"
    ):
        run_step(step, store)
    assert time.monotonic() - t0 < 10
