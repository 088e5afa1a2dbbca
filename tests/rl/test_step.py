"""The RL step (HF policy on the trainer's own weights) and its place in the pipeline plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

import schemas
from coa import io
from coa.plan import PipelineConfig, load_pipeline_config, not_planned, plan
from coa.rl import step as rl_step
from coa.rl.config import RLLora, RLStageConfig
from coa.steps import ModelInput, Step, StepResult, TableInput, run_step
from coa.tools.config import ToolsConfig

from .helpers import prompts_table


def _prompts(store: io.Store, test: int) -> io.ArtifactRef:
    """A converted artifact of 4 RL prompts (``test`` keeps each test's artifact its own)."""
    writer = store.writer("converted", "coa", {"test": test})
    writer.write_table("rl_prompts", prompts_table(4), schemas.RL_PROMPT)
    return writer.commit()


def test_rl_step_commits_model_rollouts_and_lineage_then_reuses(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = io.Store(str(tmp_path / "store"))
    converted = _prompts(store, 1)
    config = RLStageConfig(
        max_steps=2, prompts_per_step=2, group_size=2, steps_per_generation=2, save_steps=2, max_turns=2,
        max_new_tokens=12, max_total_tokens=24, overlong_buffer=8, entropy_floor=None, launcher="in_process",
        tools=ToolsConfig(enabled=("code",), record="off"), heldout_eval_steps=2, heldout_fraction=0.25,
    )  # fmt: skip
    step = rl_step.step(config, ModelInput(external=str(tiny_model)), TableInput(converted, "rl_prompts"))
    built = run_step(step, store)
    rollouts = io.read_table(built.ref, "rollouts")
    assert isinstance(rollouts, pa.Table) and schemas.ROLLOUT.check(rollouts).ok
    assert rollouts.num_rows >= 4 and set(rollouts.column("step").to_pylist()) == {0}
    lineage = io.read_lineage(built.ref)
    assert lineage["base_model"] == str(tiny_model) and lineage["prompts"]["rows"] == 4
    assert lineage["steps_run"] == 2 and built.summary["steps_run"] == 2
    # the held-out score (one prompt kept out, greedy) before step 0 and at step 2; the alarm's verdict
    assert lineage["heldout"]["prompts"] == 1 and [p["step"] for p in lineage["heldout"]["points"]] == [0, 2]
    assert "alarm" in lineage and built.summary["heldout"] == lineage["heldout"]["points"]
    signal = lineage["learning_signal"]  # the groups the run had to learn from, counted from its rollouts
    assert signal["episodes"] == rollouts.num_rows and signal["families"].keys() == {"math"}
    assert (built.summary["no_signal"] is None) == (signal["groups_with_a_correct_episode"] > 0)
    _check_published(built, step, monkeypatch)
    assert (Path(ModelInput(ref=built.ref).local_path()) / "config.json").is_file()
    again = run_step(step, store)
    assert again.reused and again.ref.uri == built.ref.uri


def test_a_lora_rl_step_commits_the_merged_model_and_the_adapter(tiny_model: Path, tmp_path: Path) -> None:
    """rl.lora: the artifact's model/ is the merged model (what evaluate loads, no peft) and adapter/ the
    adapter alone."""
    from transformers import AutoModelForCausalLM

    store = io.Store(str(tmp_path / "store"))
    converted = _prompts(store, 2)
    config = RLStageConfig(
        max_steps=2, prompts_per_step=2, group_size=2, steps_per_generation=2, save_steps=2, max_turns=2,
        max_new_tokens=12, max_total_tokens=24, overlong_buffer=8, entropy_floor=None, launcher="in_process",
        tools=ToolsConfig(enabled=("code",), record="off"), lora=RLLora(r=4, alpha=8),
    )  # fmt: skip
    step = rl_step.step(config, ModelInput(external=str(tiny_model)), TableInput(converted, "rl_prompts"))
    built = run_step(step, store)
    model = Path(ModelInput(ref=built.ref).local_path())
    merged = AutoModelForCausalLM.from_pretrained(str(model))
    assert not any("lora" in k for k in merged.state_dict())
    assert (io.local_folder(built.ref, rl_step.ADAPTER_FOLDER) / "adapter_config.json").is_file()


def _check_published(built: StepResult, step: Step, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-step Prefect artifact shows the held-out curve, and the alarm when there is one."""
    from tasks import publish

    made: list[dict[str, str]] = []
    monkeypatch.setattr(publish, "create_markdown_artifact", lambda **kw: made.append(kw))
    monkeypatch.setattr(publish, "create_table_artifact", lambda **kw: None)
    quiet = dataclasses.replace(built, summary={**built.summary, "alarm": None})
    publish.publish(step, quiet)
    assert "held-out correct" in made[-1]["markdown"] and "alarm" not in made[-1]["markdown"].lower()
    alarm = "reward-hacking alarm at step 2: the training reward rose by +0.300 over steps 0-2 ..."
    publish.publish(step, dataclasses.replace(built, summary={**built.summary, "alarm": alarm}))
    assert f"**Reward-hacking alarm:** {alarm}" in made[-1]["markdown"]
    assert made[-1]["description"].endswith("REWARD-HACKING ALARM")
    silent = {**built.summary, "no_signal": "no RL rollout ..."}
    publish.publish(step, dataclasses.replace(built, summary=silent))
    assert "**No learning signal:** no RL rollout ..." in made[-1]["markdown"]


def test_plan_puts_rl_after_sft_and_evaluates_after_it() -> None:
    config = load_pipeline_config("configs/demo.yaml")
    assert config.rl is not None
    names = [s.name for s in plan(config)]
    assert names.index("sft") < names.index("rl") < names.index("evaluate.after_rl") < names.index("report")
    assert "rl" not in not_planned(config, plan(config))
    without = PipelineConfig.model_validate(config.model_dump() | {"rl": None})
    assert "rl" not in [s.name for s in plan(without)]
    assert not_planned(without, plan(without))["rl"] == "not configured"


def test_the_report_shows_after_rl_columns_only_after_an_rl_phase() -> None:
    from coa.evaluate.training_report import comparison_plot, comparison_rows, format_comparison

    before: dict[str, dict[str, float]] = {
        "code": {"n": 50, "format_valid": 0.5, "accuracy": 0.0},
        "all": {"n": 50, "accuracy": 0.0},
    }
    after: dict[str, dict[str, float]] = {
        "code": {"n": 50, "format_valid": 0.7, "accuracy": 0.1, "tokens_per_task": 300.0},
        "all": {"n": 50},
    }
    after_rl: dict[str, dict[str, float]] = {
        "code": {"n": 50, "format_valid": 0.9, "accuracy": 0.2, "tokens_per_task": 250.0},
        "all": {"n": 50},
    }
    rows = comparison_rows(before, after, None, after_rl)
    assert rows[0]["accuracy_after_rl"] == 0.2 and rows[0]["tokens_per_task_after_rl"] == 250.0
    table = format_comparison(rows)
    assert "acc. after RL" in table and "valid after RL" in table and "20%" in table
    assert "after RL" not in format_comparison(comparison_rows(before, after))
    assert comparison_plot(rows)  # four series draw


def test_a_dead_search_or_judge_endpoint_fails_the_rl_step_in_seconds_before_the_trainer(
    tiny_model: Path, tmp_path: Path
) -> None:
    """rl.tools' search endpoint and rl.judge are checked before the trainer is built or launched: exit 3
    within seconds, naming the key to fix, not after the model is loaded and every episode retried."""
    import time

    from coa.llm.config import LLMConfig
    from coa.llm.preflight import EndpointUnusable
    from tests.test_collect_failfast import closed_port

    store = io.Store(str(tmp_path / "store"))
    converted = _prompts(store, 3)
    url = f"http://127.0.0.1:{closed_port()}"
    search = {"provider": "retrieve", "retrieve": {"url": f"{url}/retrieve", "max_retries": 4}}
    dead_tools = ToolsConfig.model_validate({"enabled": ["web_search"], "search": search, "record": "off"})
    judge = LLMConfig.model_validate(
        {"endpoints": [{"name": "judge", "base_url": f"{url}/v1", "model": "j"}]}
    )
    cases: list[tuple[dict[str, object], str]] = [
        ({"tools": dead_tools}, r"retrieve search endpoint .* fix rl\.tools\.search\.retrieve "),
        (
            {"judge": judge, "judge_audit_set": str(tmp_path / "audit.jsonl")},
            r"judge endpoint 'judge' .*rl\.judge\.endpoints",
        ),
    ]
    for update, said in cases:
        config = RLStageConfig(launcher="in_process", tools=ToolsConfig(enabled=("code",), record="off"))
        config = RLStageConfig.model_validate({**config.model_dump(), **update})
        step = rl_step.step(config, ModelInput(external=str(tiny_model)), TableInput(converted, "rl_prompts"))
        t0 = time.monotonic()
        with pytest.raises(EndpointUnusable, match=said) as failed:
            run_step(step, store)
        assert time.monotonic() - t0 < 10 and failed.value.exit_code == 3
        assert not (tmp_path / "store" / "checkpoints").exists()  # no trainer was started
