"""``rl.families: auto``: the pick from the SFT model's evaluation, in the step and in the plans."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import schemas
from coa import io
from coa.errors import UserError
from coa.plan import PipelineConfig, load_pipeline_config, plan
from coa.rl import step as rl_step
from coa.rl.config import RLError, RLStageConfig
from coa.rl.family import EVAL_COLUMNS, accuracy_by_family, pick_family, unreachable_families
from coa.rl.grpo import select_prompts
from coa.steps import ModelInput, TableInput, Upstream, run_step
from coa.tools.config import ToolsConfig
from tests.evaluate.test_metrics import row

from .helpers import math_prompt, prompts_table


def evaluation(scores: dict[str, tuple[int, int]], valid: dict[str, int] | None = None) -> pa.Table:
    """An eval.v1-shaped table: family → (correct, tasks); ``valid``: family → format-valid rows."""
    rows = [
        {"family": family, "correct": i < correct, "format_valid": i < (valid or {}).get(family, tasks)}
        for family, (correct, tasks) in scores.items()
        for i in range(tasks)
    ]
    return pa.Table.from_pylist(rows)


def test_the_weakest_family_the_model_solves_sometimes_is_picked() -> None:
    table = evaluation({"code": (0, 50), "math": (67, 100), "mhqa": (10, 50), "web": (1, 4)})
    assert accuracy_by_family(table)["math"] == {
        "tasks": 100,
        "correct": 67,
        "accuracy": 0.67,
        "format_valid": 1.0,
    }
    choice = pick_family(table, ["code", "math", "mhqa"])  # no RL prompt of web: not a candidate
    assert choice.family == "mhqa" and choice.warning is None
    assert choice.accuracy == {"code": 0.0, "math": 0.67, "mhqa": 0.2}
    assert pick_family(table, ["code", "math"]).family == "math"  # code at 0% teaches no accuracy


def test_without_a_learnable_family_the_pick_falls_back_and_warns() -> None:
    # the demo's SFT model when it solves all of math: code 0% but 62% valid, mhqa (untrained) 0% valid
    table = evaluation({"code": (0, 50), "math": (100, 100), "mhqa": (0, 50)}, valid={"code": 31, "mhqa": 0})
    choice = pick_family(table, ["code", "math", "mhqa"])
    assert choice.family == "code"  # below 1, the highest accuracy; a tie: the most format-valid
    assert "no family the SFT model solves sometimes (code 0%, math 100%, mhqa 0%)" in choice.warning
    solved = pick_family(evaluation({"code": (5, 5), "math": (9, 9)}), ["code", "math"])
    assert solved.family == "code" and "every family solved" in solved.rule
    with pytest.raises(RLError, match=r"evaluated: \['web'\], prompts: \['math'\]"):
        pick_family(evaluation({"web": (1, 2)}), ["math"])


def test_families_whose_tools_rl_does_not_enable_are_not_candidates() -> None:
    # the demo: RL enables only code; multi-hop (the weakest) needs wiki_search, so it cannot be learned
    variants = {"code": {"code_math"}, "math": {"code_math"}, "mhqa": {"mhqa"}, "web": {"web", "afm"}}
    unreachable = unreachable_families(variants, ["code"])
    assert unreachable == {
        "mhqa": "its prompts call wiki_search; rl.tools.enabled has code"
    }  # afm calls code
    table = evaluation({"code": (0, 50), "math": (67, 100), "mhqa": (10, 50)})
    choice = pick_family(table, variants, unreachable)
    assert choice.family == "math" and choice.excluded == unreachable and "mhqa" not in choice.accuracy
    assert (
        pick_family(table, variants, unreachable_families(variants, ["code", "wiki_search"])).family == "mhqa"
    )
    assert unreachable_families({"web": {"web"}}, [])["web"] == (
        "its prompts call crawl_page, web_search; rl.tools.enabled has none"
    )
    with pytest.raises(
        RLError, match=r"prompts: \[\]; mhqa left out: its prompts call wiki_search.*rl.tools.enabled"
    ):
        pick_family(
            evaluation({"mhqa": (1, 2)}), ["mhqa"], unreachable_families({"mhqa": {"mhqa"}}, ["code"])
        )


def test_a_run_of_its_own_needs_the_families_named() -> None:
    with pytest.raises(RLError, match="a run on its own needs the families named"):
        select_prompts(prompts_table(2), "auto")


def test_the_plan_evaluates_the_sft_model_before_rl_picks_its_family() -> None:
    demo = load_pipeline_config("configs/demo.yaml", ["rounds=1"])  # the demo names its family
    auto = load_pipeline_config("configs/demo.yaml", ["rounds=1", "rl.families=auto"])
    assert demo.rl is not None and demo.rl.families == ("code",)
    named = {s.name: s for s in plan(demo)}
    steps = {s.name: s for s in plan(auto)}
    order = list(steps)
    assert order.index("evaluate.after") < order.index("rl") < order.index("evaluate.after_rl")
    assert steps["rl"].inputs["evaluation"] == Upstream("evaluate.after", "eval")
    assert "evaluation" not in named["rl"].inputs  # named families: the evaluation is not an input
    no_eval = PipelineConfig.model_validate(auto.model_dump() | {"evaluate": None})
    with pytest.raises(UserError, match="rl.families: auto picks the family from an evaluation"):
        plan(no_eval)


@pytest.mark.sandbox
def test_the_rl_step_trains_on_the_picked_family_and_records_why(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = io.Store(str(tmp_path / "store"))
    code = {**math_prompt(9, 1, 2), "prompt_id": "c9@code", "task_id": "c9", "family": "code"}
    writer = store.writer("converted", "coa", {"test": 1})
    mhqa = {
        **math_prompt(8, 1, 2),
        "prompt_id": "q8@mhqa",
        "task_id": "q8",
        "family": "mhqa",
        "variant": "mhqa",
    }
    rows = [math_prompt(i, 10 + i, 20) for i in range(2)] + [code, mhqa]
    writer.write_table("rl_prompts", schemas.RL_PROMPT.from_rows(rows), schemas.RL_PROMPT)
    converted = writer.commit()
    scored = [row(f"c{i}", 0, False, family="code") for i in range(3)]
    scored += [row(f"m{i}", 0, i == 0, family="math") for i in range(3)]
    scored += [row(f"q{i}", 0, False, family="code", format_valid=False) for i in range(2)]
    scored += [row(f"h{i}", 0, i == 0, family="mhqa") for i in range(4)]  # the weakest, but needs wiki_search
    writer = store.writer("eval", "sft", {"test": 1})
    writer.write_table("eval", schemas.EVAL.from_rows(scored), schemas.EVAL)
    judged = writer.commit()
    # what the step reads of it (EVAL_COLUMNS) keeps the format-valid share the fallback's tie-break needs
    read = accuracy_by_family(io.read_table(judged, "eval", columns=EVAL_COLUMNS))
    assert read["code"]["format_valid"] == 3 / 5 and read["math"]["format_valid"] == 1.0
    config = RLStageConfig(
        families="auto", max_steps=2, prompts_per_step=2, group_size=2, steps_per_generation=2, save_steps=2,
        max_turns=2, max_new_tokens=12, max_total_tokens=24, overlong_buffer=8, entropy_floor=None,
        launcher="in_process", tools=ToolsConfig(enabled=("code",), record="off"),
    )  # fmt: skip
    prompts = TableInput(converted, "rl_prompts")
    step = rl_step.step(
        config, ModelInput(external=str(tiny_model)), prompts, evaluation=TableInput(judged, "eval")
    )
    built = run_step(step, store)
    lineage = io.read_lineage(built.ref)
    assert lineage["families"] == ["math"] and lineage["family_choice"]["accuracy"] == {
        "code": 0.0,
        "math": 1 / 3,
    }
    assert lineage["family_choice"]["excluded"] == {
        "mhqa": "its prompts call wiki_search; rl.tools.enabled has code"
    }
    assert built.summary["family_choice"]["family"] == "math"
    trained = set(io.read_table(built.ref, "rollouts").column("prompt_id").to_pylist())
    assert trained and all(p.endswith("@code_math") for p in trained)  # no code prompt was rolled out
    from tasks import publish

    made: list[dict[str, str]] = []
    monkeypatch.setattr(publish, "create_markdown_artifact", lambda **kw: made.append(kw))
    monkeypatch.setattr(publish, "create_table_artifact", lambda **kw: None)
    publish.publish(step, built)  # the RL step's Prefect artifact names the family and why
    assert "Family: **math** (lowest held-out accuracy above 0 and below 1" in made[-1]["markdown"]
    assert "code 0%, math 33%" in made[-1]["markdown"]
    assert "Left out: mhqa (its prompts call wiki_search; rl.tools.enabled has code)." in made[-1]["markdown"]


def test_a_night_with_auto_families_evaluates_its_sft_model_first() -> None:
    from coa.plan.nightly import nightly_plan

    for families, has_sft_eval in (("auto", True), ("[math]", False)):
        cfg = load_pipeline_config("configs/demo.yaml", ["rounds=1", f"rl.families={families}"])
        steps = {s.name: s for s in nightly_plan(cfg, champion=None)}
        assert ("evaluate.sft" in steps) == has_sft_eval
        if has_sft_eval:
            order = list(steps)
            assert order.index("sft") < order.index("evaluate.sft") < order.index("rl")
            assert steps["evaluate.sft"].inputs["model"] == Upstream("sft")
            assert steps["rl"].inputs["evaluation"] == Upstream("evaluate.sft", "eval")


def test_coa_rl_with_auto_families_and_no_evaluation_says_how_to_fix_it(storage_root: Path) -> None:
    from typer.testing import CliRunner

    from coa.cli import app

    writer = io.Store().writer("converted", "coa", {"cli": "auto"})
    writer.write_table("rl_prompts", prompts_table(2), schemas.RL_PROMPT)
    converted = writer.commit()
    result = CliRunner().invoke(
        # a local folder: a hub id would first need the hub (refused in one line without network)
        app,
        ["rl", "--data", converted.uri, "--model", str(storage_root), "rl.families=auto"],
    )
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "pass `--eval` (coa rl)" in said, said
