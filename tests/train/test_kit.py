"""The trainer kit SFT and RL share: one config declaration, the run guards, the launcher that brings
a launched run's own error back, the command line's exit codes, the tracking arguments."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from coa.config import load_config
from coa.evaluate.config import EvalConfig
from coa.kit import TrainLoop, TrainRun, TrainStage
from coa.kit import run as kit
from coa.kit.launch import FAILURE_FILE, launch_accelerate
from coa.kit.tracking import tracking_args
from coa.rl.config import RL, RLRunConfig, RLStageConfig, RLStepCountError
from coa.rollout.config import RolloutConfig, RolloutLimits
from coa.train.config import SFT, SFTError, SFTRunConfig, SFTStageConfig, StepCountError
from coa.train.sft import main
from tests.train.rows import arith_rows

REPO = Path(__file__).resolve().parents[2]

CPU_ACCELERATE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "NO",
    "mixed_precision": "no",
    "num_machines": 1,
    "num_processes": 1,
    "use_cpu": True,
    "dynamo_config": {"dynamo_backend": "NO"},
}


def test_shared_fields_are_declared_once_with_each_recipes_defaults() -> None:
    for name in (*TrainLoop.model_fields, *TrainStage.model_fields):
        sft, rl = SFTStageConfig.model_fields[name], RLStageConfig.model_fields[name]
        assert sft.description == rl.description and sft.metadata == rl.metadata, name
    for name in TrainRun.model_fields:
        assert SFTRunConfig.model_fields[name].description == RLRunConfig.model_fields[name].description
    for name in RolloutLimits.model_fields:
        infos = [m.model_fields[name] for m in (RolloutConfig, EvalConfig, RLStageConfig)]
        assert len({(i.description, repr(i.metadata)) for i in infos}) == 1, name
    # each recipe keeps its own defaults, and a default that differs is the only thing it restates
    assert (SFTStageConfig(max_steps=1).learning_rate, RLStageConfig().learning_rate) == (2e-5, 1e-4)
    assert (SFTStageConfig(max_steps=1).save_steps, RLStageConfig().save_steps) == (500, 10)
    assert (EvalConfig().max_turns, EvalConfig().max_total_tokens) == (8, 1536)
    assert (RLStageConfig().max_turns, RLStageConfig().max_total_tokens) == (6, 768)
    # one set of limits builds the engine's config, for evaluation and RL alike
    rl = RLStageConfig(max_turns=3, duplicate_calls="run")
    assert (
        RolloutConfig(**rl.limits()).max_turns == 3 and RolloutConfig(**rl.limits()).duplicate_calls == "run"
    )


def test_users_yaml_keys_stay_flat_and_rl_refuses_what_it_cannot_train(tmp_path: Path) -> None:
    section = tmp_path / "section.yaml"
    section.write_text("max_steps: 5\nlearning_rate: 0.001\nmax_turns: 3\nnum_processes: 2\n")
    rl = load_config(section, model=RLStageConfig)
    assert (rl.max_steps, rl.learning_rate, rl.max_turns, rl.num_processes) == (5, 0.001, 3, 2)
    section.write_text("max_steps: 5\nlearning_rate: 0.001\nnum_processes: 2\n")
    sft = load_config(section, model=SFTStageConfig)
    assert (sft.max_steps, sft.learning_rate, sft.num_processes) == (5, 0.001, 2)
    assert load_config(None, ["max_context_tokens=4096"], model=EvalConfig).max_context_tokens == 4096
    with pytest.raises(ValueError, match="max_context_tokens must be null in RL"):
        RLStageConfig(max_context_tokens=4096)
    with pytest.raises(ValueError, match="rl needs max_steps"):
        RLStageConfig(max_steps=None)


def test_a_run_config_is_its_stage_config_plus_where_it_reads_and_writes() -> None:
    """One declared config per trainer: a run's form has every field of its stage's, the values the
    stage set, and only the run's own fields besides; the stage's own fields never block a resume."""
    for stage_model, run_model in ((SFTStageConfig, SFTRunConfig), (RLStageConfig, RLRunConfig)):
        assert issubclass(run_model, stage_model)
        extra = set(run_model.model_fields) - set(stage_model.model_fields)
        run_own = {"data", "table", "prompts", "observation_root", "encyclopedia"}
        assert extra - set(TrainRun.model_fields) <= run_own
    stage = SFTStageConfig(max_steps=3, name="sft-r2", launcher="accelerate", num_processes=2, seed=7)
    run = SFTRunConfig(**stage.model_dump(), base_model="m", output_dir="o")
    assert run.model_dump(include=set(SFTStageConfig.model_fields)) == stage.model_dump()
    # a checkpoint's plan written before the run form carried the stage's fields resumes
    stage_only = {"name", "families", *TrainStage.model_fields}
    saved = SFTRunConfig(max_steps=3, seed=7, base_model="m").model_dump(mode="json", exclude=stage_only)
    kit.check_resumable(SFT, saved, run)
    with pytest.raises(SFTError, match=r"families: None -> \['math'\]"):
        kit.check_resumable(SFT, saved, run.model_copy(update={"families": ("math",)}))
    rl = RLRunConfig(**RLStageConfig(name="rl-r2").model_dump(), base_model="m")
    kit.check_resumable(RL, RLRunConfig(base_model="m").model_dump(mode="json"), rl)


def test_a_run_from_a_file_trains_on_the_families_its_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``families`` is part of the one SFT config: ``python -m coa.train.sft`` selects them as the step
    does (checked before any model is loaded: no example of the family is a clear error)."""
    data = tmp_path / "examples.parquet"
    pq.write_table(arith_rows(4, seed=1), data)
    config = tmp_path / "run.yaml"
    run = {"base_model": str(tmp_path / "no-model"), "data": str(data), "max_steps": 1, "families": ["code"]}
    config.write_text(yaml.safe_dump(run))
    assert main(["--config", str(config)]) == 2
    assert "no SFT example of families ['code']; the data holds ['math']" in capsys.readouterr().err


class _Trainer(SimpleNamespace):
    def is_world_process_zero(self) -> bool:
        return True


def test_run_guards_are_the_same_for_both_recipes(tmp_path: Path) -> None:
    sft = SFTRunConfig(base_model="m", max_steps=4)
    rl = RLRunConfig(base_model="m", max_steps=4)
    for recipe, config, error, count_error in ((SFT, sft, SFTError, StepCountError),
                                               (RL, rl, RL.error, RLStepCountError)):  # fmt: skip
        out = tmp_path / recipe.name
        with pytest.raises(error, match="no output folder"):
            kit.open_run(recipe, config, None, resume=False)
        start = kit.open_run(recipe, config, out, resume=False)
        assert (start.last, start.plan, start.start_step) == (None, None, 0)
        kit.write_plan(recipe, _Trainer(), start, {"max_steps": 4}, config)
        (out / "checkpoints" / "checkpoint-2").mkdir(parents=True)
        (out / "checkpoints" / "checkpoint-3").mkdir()  # killed while writing: no trainer state
        (out / "checkpoints" / "checkpoint-2" / kit.TRAINER_STATE).write_text("{}")
        with pytest.raises(error, match=r"already holds checkpoints \(last: checkpoint-2\)"):
            kit.open_run(recipe, config, out, resume=False)
        changed = config.model_copy(update={"learning_rate": 0.5, "logging_steps": 7})
        with pytest.raises(error, match=r"changed training config \(learning_rate: .* -> 0\.5\)"):
            kit.open_run(recipe, changed, out, resume=True)  # logging_steps may change, learning_rate not
        start = kit.open_run(recipe, config.model_copy(update={"logging_steps": 7}), out, resume=True)
        assert start.start_step == 2 and start.plan is not None and start.plan["max_steps"] == 4
        trainer = _Trainer(state=SimpleNamespace(global_step=3))
        with pytest.raises(
            count_error, match=rf"{recipe.title} took 1 optimizer steps in this run but the plan was 2"
        ):
            kit.check_steps(recipe, 1, trainer, 4, start)
        kit.check_steps(recipe, 2, _Trainer(state=SimpleNamespace(global_step=4)), 4, start)
        (out / recipe.plan_file).unlink()
        with pytest.raises(error, match="is missing: cannot tell what plan"):
            kit.open_run(recipe, config, out, resume=True)


def test_both_recipes_report_through_one_tracking_hook(tmp_path: Path) -> None:
    for recipe, config in (
        (SFT, SFTRunConfig(base_model="m", max_steps=1)),
        (RL, RLRunConfig(base_model="m")),
    ):
        args = tracking_args(recipe, config, tmp_path / "sft-abc123")
        assert args == {"report_to": "none", "run_name": f"{recipe.name}/sft-abc123"}


def _write(tiny_model: Path, rows: pa.Table, tmp_path: Path, **kw: Any) -> tuple[SFTRunConfig, Path]:
    config = SFTRunConfig(
        base_model=str(tiny_model), max_steps=2, learning_rate=3e-3, batch_size=8, max_length=256,
        logging_steps=1, save_steps=2, **kw,
    )  # fmt: skip
    accelerate = tmp_path / "cpu.yaml"
    accelerate.write_text(yaml.safe_dump(CPU_ACCELERATE))
    return config, accelerate


def test_launched_run_returns_its_result_and_its_own_error(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """The stage's GPU path on CPU: `accelerate launch -m coa.train.sft`, then the same launch with a
    changed config refused by the launched run and re-raised here as the same error, same message."""
    config, accelerate = _write(tiny_model, sft_rows, tmp_path)
    out = tmp_path / "out"
    result = launch_accelerate(SFT, sft_rows, config, out, str(accelerate))
    assert result["global_step"] == result["steps_run"] == 2 and result["device"] == "cpu"
    resolved = yaml.safe_load((out / "resolved.yaml").read_text())
    assert resolved["data"] == str(out / SFT.data_file) and load_config(
        out / "resolved.yaml", model=SFTRunConfig
    )
    with pytest.raises(
        SFTError, match=r"changed training config \(learning_rate.*in `accelerate launch -m coa"
    ):
        launch_accelerate(
            SFT, sft_rows, config.model_copy(update={"learning_rate": 1e-3}), out, str(accelerate)
        )
    assert json.loads((out / FAILURE_FILE).read_text())["error"] == "SFTError"
    with pytest.raises(SFTError, match="accelerate config .* not found"):
        launch_accelerate(SFT, sft_rows, config, out, str(tmp_path / "missing.yaml"))


def test_entry_point_exit_codes(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    config, _ = _write(tiny_model, sft_rows, tmp_path, output_dir=str(tmp_path / "out"))
    resolved = tmp_path / "run.yaml"
    resolved.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    assert main(["--config", str(resolved)]) == 2  # no rows named
    assert main(["--config", str(resolved), "max_step=3"]) == 2  # a config error
    (tmp_path / "out" / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "out" / "checkpoints" / "checkpoint-1" / kit.TRAINER_STATE).write_text("{}")
    data = tmp_path / "rows.parquet"
    pq.write_table(sft_rows, data)
    assert main(["--config", str(resolved), "--data", str(data)]) == 2
    said = json.loads((tmp_path / "out" / FAILURE_FILE).read_text())
    assert said["error"] == "SFTError" and "already holds checkpoints" in said["message"]
