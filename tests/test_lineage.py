"""Lineage of a real short pipeline run, `coa lineage` (tree, --html), and the registry CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from coa import io
from coa._cli import models as models_cli
from coa.cli import app
from coa.lineage import EXTERNAL, format_tree, to_markdown, trace
from coa.plan import load_pipeline_config, plan
from coa.steps import StepResult, run_step

from .flows.test_pipeline_flow import SMALL

REPO = Path(__file__).resolve().parents[1]


def _run_plan(overrides: list[str]) -> dict[str, StepResult]:
    cfg = load_pipeline_config(REPO / "configs/demo.yaml", overrides)
    done: dict[str, StepResult] = {}
    for step in plan(cfg):
        done[step.name] = run_step(step, io.Store(), done)
    return done


def test_lineage_from_the_fine_tuned_model_to_the_task_sets(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    done = _run_plan([*SMALL, "evaluate=null"])
    sft = done["sft"].ref.uri
    graph = trace(sft)
    by_step = {n.step: n for n in graph.nodes.values() if n.step}
    assert {"synthetic", "collect", "curate", "convert", "student", "sft"} <= set(by_step)
    for name in ("synthetic", "collect", "curate", "convert", "student"):
        assert by_step[name].uri == done[name].ref.uri
    assert by_step["curate"].checks["gate"]["success"] is True
    assert by_step["sft"].checks["steps_run"] == by_step["sft"].checks["steps_planned"] == 4
    assert by_step["synthetic"].config["seed"] == 0 and by_step["collect"].config["backend"] == "offline"
    assert all(n.code_version for n in graph.nodes.values() if n.kind != EXTERNAL)
    roles = {(graph.nodes[e.child].step, e.role, graph.nodes[e.parent].step) for e in graph.edges}
    assert ("sft", "data", "convert") in roles and ("curate", "raw", "collect") in roles
    assert ("collect", "tasks", "synthetic") in roles and ("sft", "base", "student") in roles
    assert not graph.parents(by_step["synthetic"].uri)  # the task source is a root of the DAG

    tree = format_tree(graph)
    assert tree.splitlines()[0].startswith("[model] sft: ")
    assert "(see above)" in tree  # synthetic is read by collect, curate and convert: printed once
    assert "gate: {" in tree and "steps_run: 4" in tree
    assert done["convert"].ref.uri in to_markdown(graph)

    out = tmp_path / "lineage.html"
    cli = CliRunner().invoke(app, ["lineage", sft, "--html", str(out)])
    assert cli.exit_code == 0, cli.output
    assert done["synthetic"].ref.uri in cli.stdout and done["curate"].ref.uri in cli.stdout
    page = out.read_text()
    assert "data:image/png;base64," in page and done["collect"].ref.uri in page

    # the registry CLI on the real model: promote, evaluate the champion by name, list, show
    runner = CliRunner()
    assert runner.invoke(app, ["models", "promote", "agent", done["convert"].ref.uri]).exit_code == 2
    promoted = runner.invoke(app, ["models", "promote", "agent", sft])
    assert promoted.exit_code == 0, promoted.output
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            "champion:agent",
            "--tasks",
            done["synthetic"].ref.uri,
            "evaluate.max_turns=1",
            "evaluate.max_new_tokens=4",
            "evaluate.max_total_tokens=8",
            "evaluate.limit_per_family=1",
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    eval_uri = evaluated.stdout.split("eval: ", 1)[1].split()[0]
    assert io.read_lineage(eval_uri)["inputs"]["model"]["uri"] == sft  # the champion's artifact
    assert runner.invoke(app, ["models", "rollback", "agent"]).exit_code == 2  # nothing before it
    # the CLI's console was sized when first imported: a wide one here, so no URI is folded
    monkeypatch.setattr(models_cli, "console", Console(width=400))
    listing = runner.invoke(app, ["models", "list"])
    assert "agent" in listing.stdout and sft in listing.stdout
    shown = runner.invoke(app, ["models", "show", "agent"])
    assert "manual promotion" in shown.stdout and "promote" in shown.stdout
    missing = runner.invoke(
        app, ["evaluate", "--model", "champion:nobody", "--tasks", done["synthetic"].ref.uri]
    )
    assert missing.exit_code == 2 and "has no champion yet" in missing.output
