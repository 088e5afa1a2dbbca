"""Every step the shipped plans make can be rebuilt from the stage table and what a step spec
carries, and the plans keep the choices they share in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coa.plan import load_pipeline_config, plan
from coa.plan.nightly import nightly_plan
from coa.plan.spec import rebuild
from coa.plan.stages import STAGES
from coa.steps import ModelInput, Step, Upstream

REPO = Path(__file__).resolve().parents[2]
CHAMPION = ModelInput(external="champion-folder")


def _plans() -> list[tuple[str, Step]]:
    out = []
    for profile in ("demo", "nightly"):
        cfg = load_pipeline_config(REPO / "configs" / f"{profile}.yaml")
        out += [(f"{profile}:{s.name}", s) for s in plan(cfg)]
        out += [(f"{profile}:night:{s.name}", s) for s in nightly_plan(cfg, CHAMPION)]
    return out


@pytest.mark.parametrize(("label", "step"), _plans(), ids=[label for label, _ in _plans()])
def test_every_planned_step_rebuilds_from_its_parts(label: str, step: Step) -> None:
    assert STAGES.get(step.builder) is step.stage, f"{label}: stage {step.builder!r} is not in the table"
    inputs = {role: value for role, value in step.inputs.items() if value is not None}
    again = rebuild(step.builder, step.name, step.artifact, step.config_json(), step.identity, inputs)
    assert (again.name, again.kind, again.artifact, again.builder) == (
        step.name, step.kind, step.artifact, step.builder,
    )  # fmt: skip
    assert again.config_json() == step.config_json() and dict(again.identity) == dict(step.identity)
    assert {r: v for r, v in again.inputs.items() if v is not None} == inputs
    assert (again.expects, again.produces) == (step.expects, step.produces)


def test_a_night_starts_sft_from_the_champion_and_rl_reads_the_sft_evaluation() -> None:
    cfg = load_pipeline_config(REPO / "configs" / "nightly.yaml")
    steps = {s.name: s for s in nightly_plan(cfg, CHAMPION)}
    assert steps["sft"].inputs["base"] == CHAMPION and "student" not in steps
    assert steps["rl"].inputs["evaluation"] == Upstream("evaluate.sft", "eval")
    assert steps["evaluate.champion"].inputs["model"] == CHAMPION
    first = {s.name: s for s in nightly_plan(cfg, None)}  # no champion yet: the configured base
    assert first["sft"].inputs["base"] == ModelInput(external=cfg.student.base)  # type: ignore[union-attr]
    base = load_pipeline_config(REPO / "configs" / "nightly.yaml", ["promotion.sft_from=base"])
    assert {s.name: s for s in nightly_plan(base, CHAMPION)}["sft"].inputs["base"] != CHAMPION


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_every_stage_has_a_frozen_config_class_and_the_untyped_ones_keep_their_keys() -> None:
    """A stage's config is a frozen pydantic model (extra keys refused); the stages whose config was
    a plain dict (eval-report, report, the nightly ones) dump the same JSON, so their keys stay."""
    from coa.evaluate.step import eval_report_step, report_step
    from coa.nightly.step import merge_step, new_tasks_step

    for stage in STAGES.values():
        assert stage.config is not None, stage.name
        assert stage.config.model_config.get("frozen") and stage.config.model_config.get("extra") == "forbid"
    table = Upstream("t", "tasks")
    dumped = {
        s.builder: s.config_json()
        for s in (
            eval_report_step("r", table),
            report_step("demo", table, table, None, None, None),
            new_tasks_step(table, {}),
            merge_step(table, table, {}, {}),
        )
    }
    assert dumped == {
        "eval-report": {"bootstrap_samples": 2000},
        "report": {"run_name": "demo"},
        "nightly.new_tasks": {"exclude": "task ids of earlier nights' collections"},
        "nightly.merge": {"dedup": ["run_id", "task_id"]},
    }


def test_the_runner_stays_at_the_bottom() -> None:
    """coa.steps imports no stage, no registry, no plan (anywhere in the file)."""
    above = {i for i in _imports(REPO / "coa" / "steps.py") if i.startswith("coa.")}
    allowed = {
        "coa.io",
        "coa.errors",
        "coa.execution",
        "coa.attempts",
        "coa.resources",
        "coa.inputs",
        "coa.progress",
        "coa.summary",
    }
    assert above <= allowed | {"coa.facts", "coa.version"}, above
    metered = {i for i in _imports(REPO / "coa" / "resources.py") if i.startswith("coa.")}
    assert not metered, metered  # the build meter: the standard library only
    below = {i for i in _imports(REPO / "coa" / "attempts.py") if i.startswith("coa.")}
    assert below <= {"coa.io"}, below  # its failure markers: storage only


def test_only_the_plans_know_the_plans_and_the_registry_knows_none() -> None:
    users = {
        str(p.relative_to(REPO))
        for p in (REPO / "coa").rglob("*.py")
        if not p.is_relative_to(REPO / "coa" / "plan") and any(i.startswith("coa.plan") for i in _imports(p))
    }
    # the CLI (its command modules) loads profiles and asks the plans
    # and prints what a stage presents (coa/_cli/facts.py: the stage table's presenters); the stage
    # commands are generated from the stage table (stages.py), read their inputs by the contracts the
    # stages produce (given.py) and make their steps as the plans do (commands.py)
    cli = {"coa/_cli/common.py", "coa/_cli/run.py", "coa/_cli/facts.py"}
    cli |= {"coa/_cli/stages.py", "coa/_cli/given.py", "coa/_cli/commands.py"}
    assert users == cli, users
    registry = set().union(*(_imports(p) for p in (REPO / "coa" / "registry").rglob("*.py")))
    assert not {i for i in registry if i.startswith("coa.plan")}
