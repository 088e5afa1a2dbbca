"""``rounds: N``: self-improvement rounds as steps of the pipeline plan (sample → curate beside the
teacher → convert → SFT from the previous round → evaluate), RL after the last round."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from coa.config import ConfigError
from coa.plan import load_pipeline_config, plan
from coa.plan.spec import rebuild
from coa.steps import Upstream

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"


def _steps(*overrides: str) -> dict[str, object]:
    return {s.name: s for s in plan(load_pipeline_config(DEMO, list(overrides)))}


def test_two_rounds_add_the_round_steps_with_their_inputs() -> None:
    overrides = ["rounds=2", "round_sft={max_steps: 300}", "sampling.samples=3", "rl.families=auto"]
    steps = plan(load_pipeline_config(DEMO, overrides))
    names = [s.name for s in steps]
    at = names.index("evaluate.after")
    assert names[at + 1 : at + 6] == ["sample.r1", "curate.r2", "convert.r2", "sft.r2", "evaluate.after_r2"]
    assert names[at + 6 :] == ["rl", "evaluate.after_rl", "collect.heldout", "report"]
    by = {s.name: s for s in steps}
    train = Upstream("synthetic", "train")
    encyclopedia = Upstream("synthetic", "encyclopedia")  # what its local search serves
    assert by["sample.r1"].inputs == {"model": Upstream("sft"), "tasks": train, "encyclopedia": encyclopedia}
    assert by["sample.r1"].identity["round"] == 1
    sampling = by["sample.r1"].config
    assert (sampling.samples, sampling.prompt_style, sampling.variants) == (3, None, None)  # from the model
    raw, student = Upstream("collect", "trajectories"), Upstream("sample.r1", "rollouts")
    assert by["curate.r2"].inputs == {"raw": raw, "tasks": train, "student": student}
    assert by["curate.r2"].config == by["curate"].config
    assert by["convert.r2"].inputs["curated"] == Upstream("curate.r2", "trajectories")
    assert by["sft.r2"].inputs == {"base": Upstream("sft"), "data": Upstream("convert.r2", "sft")}
    assert (by["sft"].config.max_steps, by["sft.r2"].config.max_steps) == (5000, 300)
    assert by["sft.r2"].config.learning_rate == by["sft"].config.learning_rate  # only the override differs
    assert by["evaluate.after_r2"].inputs["model"] == Upstream("sft.r2")
    assert by["rl"].inputs["base"] == Upstream("sft.r2")  # RL follows the last round
    assert by["rl"].inputs["evaluation"] == Upstream("evaluate.after_r2", "eval")
    report = by["report"].inputs
    assert report["after_r2"] == Upstream("evaluate.after_r2", "eval") and report["sft_r2"] == Upstream(
        "sft.r2"
    )
    assert report["after"] == Upstream("evaluate.after", "eval") and report["sft"] == Upstream("sft")


def test_one_round_is_the_plan_of_before() -> None:
    one = plan(load_pipeline_config(DEMO, ["rounds=1"]))  # the demo itself has a round on programming
    names = [s.name for s in one]
    assert not any(n.startswith(("sample", "curate.r", "sft.r")) for n in names)
    by = {s.name: s for s in one}
    assert set(by["curate"].inputs) == {"raw", "tasks"}  # no student input: the key is unchanged
    assert not any(r.startswith(("after_r", "sft_r")) for r in by["report"].inputs if r != "after_rl")


def test_three_rounds_chain_each_model_to_the_next_and_every_step_rebuilds() -> None:
    steps = plan(load_pipeline_config(DEMO, ["rounds=3", "rl=null"]))
    by = {s.name: s for s in steps}
    assert by["sample.r2"].inputs["model"] == Upstream("sft.r2") and by["sample.r2"].identity["round"] == 2
    assert by["sft.r3"].inputs["base"] == Upstream("sft.r2")
    assert by["curate.r3"].inputs["student"] == Upstream("sample.r2", "rollouts")
    assert {"after_r2", "after_r3", "sft_r2", "sft_r3"} <= set(by["report"].inputs)
    for step in steps:  # what a step spec carries is enough to rebuild each round step elsewhere
        inputs = {r: v for r, v in step.inputs.items() if v is not None}
        again = rebuild(step.builder, step.name, step.artifact, step.config_json(), step.identity, inputs)
        assert again.config_json() == step.config_json() and dict(again.identity) == dict(step.identity)
        assert {r: v for r, v in again.inputs.items() if v is not None} == inputs, step.name
        assert (again.expects, again.produces) == (step.expects, step.produces), step.name


def test_round_sft_must_be_a_valid_sft_section() -> None:
    with pytest.raises((ConfigError, ValidationError), match="max_stepz|extra"):
        load_pipeline_config(DEMO, ["rounds=2", "round_sft={max_stepz: 3}"])
    with pytest.raises((ConfigError, ValidationError)):
        load_pipeline_config(DEMO, ["rounds=0"])


def test_dry_run_lists_the_round_steps(storage_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from coa.cli import app

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, ["run", "--dry-run", "-c", "configs/demo.yaml", "rounds=2"])
    assert result.exit_code == 0, result.output
    for name in ("sample.r1", "curate.r2", "convert.r2", "sft.r2", "evaluate.after_r2"):
        assert name in result.stdout


def test_the_gpu_demo_profile_loads_and_plans_its_round(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/demo-gpu.yaml (its SFT sized on an H100; not yet run end to end): the demo's data, a
    larger student, every family in SFT, a second round before RL; `coa run --dry-run` plans it."""
    from typer.testing import CliRunner

    from coa.cli import app

    gpu, cpu = load_pipeline_config(REPO / "configs" / "demo-gpu.yaml"), load_pipeline_config(DEMO)
    assert gpu.synthetic == cpu.synthetic and gpu.collect == cpu.collect and gpu.convert == cpu.convert
    assert gpu.student is not None and cpu.student is not None
    assert gpu.student.tiny.hidden_size > cpu.student.tiny.hidden_size
    assert gpu.student.tiny.num_layers > cpu.student.tiny.num_layers
    assert gpu.sft is not None and gpu.sft.families is None and gpu.rounds == 2
    names = [s.name for s in plan(gpu)]
    assert names.index("sft.r2") < names.index("rl") < names.index("report")
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, ["run", "--dry-run", "-c", "configs/demo-gpu.yaml"])
    assert result.exit_code == 0, result.output
    assert "sample.r1" in result.stdout and "sft.r2" in result.stdout


def test_a_night_runs_its_rounds_on_the_merged_data_before_rl() -> None:
    from coa.nightly.step import MERGE
    from coa.plan.nightly import nightly_plan

    cfg = load_pipeline_config(REPO / "configs" / "nightly.yaml", ["rounds=2"])
    steps = {s.name: s for s in nightly_plan(cfg, None)}
    encyclopedia = Upstream("synthetic", "encyclopedia")
    assert steps["sample.r1"].inputs == {
        "model": Upstream("sft"),
        "tasks": Upstream(MERGE, "tasks"),
        "encyclopedia": encyclopedia,
    }
    assert steps["curate.r2"].inputs["raw"] == Upstream(MERGE, "trajectories")
    assert steps["sft.r2"].inputs["base"] == Upstream("sft") and steps["rl"].inputs["base"] == Upstream(
        "sft.r2"
    )
    assert steps["evaluate.sft"].inputs["model"] == Upstream(
        "sft.r2"
    )  # rl.families: auto judges the last round
    one = [s.name for s in nightly_plan(load_pipeline_config(REPO / "configs" / "nightly.yaml"), None)]
    assert not any(n.startswith(("sample", "sft.r")) for n in one)


def test_the_round_steps_that_run_the_student_go_to_the_gpu_pool_by_default() -> None:
    cfg = load_pipeline_config(DEMO, ["rounds=2", "dispatch.mode=deployment"])
    sent = {s.name for s in plan(cfg) if cfg.dispatch.dispatches(s.name)}
    assert sent == {"sft", "sample.r1", "sft.r2", "rl"}


def test_round_sft_is_typed_from_the_sft_section() -> None:
    """``round_sft`` has the SFT section's fields, types and bounds (one declaration: its model is made
    from SFTStageConfig); it keeps only the keys a profile sets, which the rounds' SFT lays over ``sft``."""
    from coa.plan.config import RoundSFTConfig
    from coa.train.config import SFTStageConfig

    assert set(RoundSFTConfig.model_fields) == set(SFTStageConfig.model_fields)
    config = load_pipeline_config(DEMO, ["rounds=2", "round_sft={max_steps: 7}"])
    assert config.round_sft.model_dump() == {"max_steps": 7}
    later = config.later_sft()
    assert config.sft is not None and later is not None
    assert later == config.sft.model_copy(update={"max_steps": 7}) and later.max_steps == 7
    with pytest.raises((ConfigError, ValidationError), match="round_sft.max_steps"):
        load_pipeline_config(DEMO, ["rounds=2", "round_sft={max_steps: 0}"])  # a bound of sft's field
    with pytest.raises((ConfigError, ValidationError), match="round_sft.learning_rate"):
        load_pipeline_config(DEMO, ["rounds=2", "round_sft={learning_rate: fast}"])
