"""An RL run with ``tracking.backend: tensorboard``: its event files hold the reward and entropy series."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import schemas
from coa import io, tracking
from coa.rl import step as rl_step
from coa.rl.config import RLStageConfig
from coa.steps import ModelInput, StepResult, TableInput, run_step
from coa.tools.config import ToolsConfig
from coa.tracking.config import TrackingConfig

from .helpers import prompts_table


def _rl_run(tiny_model: Path, tmp_path: Path, tracker: TrackingConfig, steps: int) -> StepResult:
    """A ``steps``-step RL run (one optimizer step logged each) on 4 prompts, reporting to ``tracker``."""
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("converted", "coa", {"test": 1})
    writer.write_table("rl_prompts", prompts_table(4), schemas.RL_PROMPT)
    converted = writer.commit()
    config = RLStageConfig(
        max_steps=steps, prompts_per_step=2, group_size=2, steps_per_generation=1, save_steps=steps,
        max_turns=2, max_new_tokens=12, max_total_tokens=24, overlong_buffer=8, entropy_floor=None,
        launcher="in_process", tools=ToolsConfig(enabled=("code",), record="off"), logging_steps=1,
    )  # fmt: skip
    step = rl_step.step(config, ModelInput(external=str(tiny_model)), TableInput(converted, "rl_prompts"))
    with tracking.activate(tracker):
        return run_step(step, store)


def test_rl_run_writes_reward_and_entropy_to_tensorboard(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    built = _rl_run(tiny_model, tmp_path, TrackingConfig(backend="tensorboard"), steps=3)
    tracker = io.read_lineage(built.ref)["tracker"]
    folder = Path(tracker["location"])
    # the default log folder is under the storage root, one folder per run (step and content key)
    assert folder.parent == tmp_path / "store" / "tracking" / "tensorboard"
    artifact_folder = built.ref.uri.rsplit("/", 1)[-1]
    assert folder.name == f"rl__{artifact_folder}" and tracker["name"] == f"rl/{artifact_folder}"
    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = events.Tags()["scalars"]
    reward = [t for t in scalars if t.endswith("reward") and t.startswith("train/")]
    entropy = [t for t in scalars if t.endswith("entropy") and t.startswith("train/")]
    assert reward and entropy, scalars
    for tag in (reward[0], entropy[0]):
        series = events.Scalars(tag)
        assert [e.step for e in series] == [1, 2, 3], tag  # one point per optimizer step (logging_steps 1)
        assert all(math.isfinite(e.value) for e in series)
    assert all(e.value >= 0 for e in events.Scalars(entropy[0]))
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlruns").exists()


def test_rl_run_writes_reward_and_entropy_to_wandb_offline(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``backend: wandb`` with ``wandb_mode: offline`` (the default): a run folder on disk, no network."""
    pytest.importorskip("wandb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_SILENT", "true")
    built = _rl_run(tiny_model, tmp_path, TrackingConfig(backend="wandb", experiment="coa-test"), steps=2)
    tracker = io.read_lineage(built.ref)["tracker"]
    runs = sorted(Path(tracker["location"]).rglob("offline-run-*"))
    assert len(runs) == 1, runs  # one offline run for the step, under the tracker's folder
    # offline W&B keeps the run as one transaction log (protobuf records) until `wandb sync`; each
    # logged step is a history record naming its keys, and the run was closed (a trainer leaves it open)
    log = next(runs[0].glob("run-*.wandb")).read_bytes()
    assert log.count(b"train/reward") >= 2 and log.count(b"train/entropy") >= 2  # one record per step
    assert "finishing run" in (runs[0] / "logs" / "debug.log").read_text()
    assert not (tmp_path / "wandb").exists()  # the run went where the config put it, not into the cwd
