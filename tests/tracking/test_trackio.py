"""Tracking with Trackio's local store (SQLite under a temporary folder, no network): an SFT run's
loss curve, an RL run's reward and entropy and an evaluation's metrics arrive, read back with
Trackio's own command line; tags and text reach it without secrets.

Trackio reads ``TRACKIO_DIR`` once, when it is imported: every test here writes to the session's
folder (:func:`trackio_dir`), and a step asking for another folder in the same process is refused
(see the last test).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import schemas
from coa import io, tracking
from coa.evaluate import step as eval_step
from coa.rl import step as rl_step
from coa.rl.config import RLStageConfig
from coa.steps import ModelInput, TableInput, run_step
from coa.tools.config import ToolsConfig
from coa.tracking.config import TrackingConfig
from coa.train import step as sft_step
from coa.train.step import read_result
from tests.conftest import TRACKIO_HOME
from tests.rl.helpers import prompts_table

from .inputs import EVAL, SFT, write_converted, write_tasks

SECRET = "sk-trackio-do-not-log-me"


@pytest.fixture
def trackio_dir() -> Path:
    """The one Trackio folder of the test session (tests/conftest.py), where this process's Trackio
    writes: it reads TRACKIO_DIR once, when first imported (TRL imports it at checkpoint saves)."""
    folder = Path(TRACKIO_HOME)
    assert os.environ["TRACKIO_DIR"] == str(folder)
    utils = sys.modules.get("trackio.utils")
    assert utils is None or Path(utils.TRACKIO_DIR) == folder, utils and utils.TRACKIO_DIR
    return folder


def trackio_cli(folder: Path, *args: str) -> Any:
    """``trackio <args> --json`` on the store in ``folder`` (Trackio's own reader, a fresh process)."""
    command = [str(Path(sys.executable).parent / "trackio"), *args, "--json"]
    env = {**os.environ, "TRACKIO_DIR": str(folder)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_trackio_gets_the_sft_curve_and_the_eval_metrics(
    trackio_dir: Path,
    tiny_model: Path,
    sft_rows: pa.Table,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COA_TEST_API_KEY", SECRET)  # a secret in the environment
    store = io.Store(str(tmp_path / "store"))
    converted = write_converted(store, sft_rows)
    project = f"coa-test-{uuid.uuid4().hex[:8]}"  # the session's store is shared: a project of its own
    config = TrackingConfig(backend="trackio", experiment=project, log_dir=str(trackio_dir))
    with tracking.activate(config):
        base = ModelInput(external=str(tiny_model))
        sft = run_step(sft_step.step(SFT, base, TableInput(converted, "sft")), store)
        model = ModelInput(ref=sft.ref)
        tools = ToolsConfig(enabled=("code",), record="off")
        tasks = TableInput(write_tasks(store), "heldout")
        evaluated = run_step(eval_step.step(EVAL, tools, tasks, model), store)
    assert os.environ["TRACKIO_DIR"] == str(trackio_dir) and tracking.RUN_ENV not in os.environ  # restored

    # the SFT run: named by the step and its content key, found where the lineage says
    tracker = io.read_lineage(sft.ref)["tracker"]
    name = f"sft/{sft.ref.uri.rsplit('/', 1)[-1]}"
    assert tracker["backend"] == "trackio" and tracker["name"] == name
    assert tracker["location"] == str(trackio_dir) and tracker["experiment"] == project
    runs = trackio_cli(trackio_dir, "list", "runs", "--project", project)["runs"]
    eval_name = io.read_lineage(evaluated.ref)["tracker"]["name"]
    assert sorted(runs) == sorted([name, eval_name])  # one run per step, the trainer's included

    # its loss curve, point by point as the trainer logged it (Trackio's own steps count the log calls)
    curve = read_result(sft.ref).loss_curve
    loss = trackio_cli(
        trackio_dir, "get", "metric", "--project", project, "--run", name, "--metric", "train/loss"
    )
    steps = trackio_cli(
        trackio_dir, "get", "metric", "--project", project, "--run", name, "--metric", "train/global_step"
    )
    logged = [v["value"] for v in loss["values"]]
    assert len(logged) == len(curve) == 4
    assert all(math.isclose(v, w, rel_tol=1e-6) for v, (_, w) in zip(logged, curve, strict=True))
    by_point = {v["step"]: v["value"] for v in steps["values"]}
    assert [by_point[v["step"]] for v in loss["values"]] == [s for s, _ in curve]  # the optimizer steps
    run = trackio_cli(trackio_dir, "get", "run", "--project", project, "--run", name)
    assert run["config"]["learning_rate"] == SFT.learning_rate  # the trainer's own integration, kept
    assert run["config"]["coa.artifact_uri"] == sft.ref.uri  # our tags, beside it
    assert run["config"]["coa.upstream.0"] == converted.uri

    # the evaluation's run: its metrics as measured, its tags lead back to the model it evaluated
    family = evaluated.summary["metrics"]["all"]
    eval_run = trackio_cli(trackio_dir, "get", "run", "--project", project, "--run", eval_name)
    assert eval_run["config"]["coa.artifact_uri"] == evaluated.ref.uri
    assert sft.ref.uri in eval_run["config"].values()
    assert "coa.headline" in eval_run["config"]
    for key in ("pass@1", "pass@1_se", "tokens_per_task", "n"):
        metric = f"metrics/all/{key.replace('@', '_at_')}"
        got = trackio_cli(
            trackio_dir, "get", "metric", "--project", project, "--run", eval_name, "--metric", metric
        )
        assert [v["value"] for v in got["values"]] == [pytest.approx(float(family[key]))], metric
    assert any(m.startswith("metrics/all/maj_at_") for m in eval_run["metrics"])

    # nothing secret anywhere in the store (database files included), nothing outside the folder
    for path in trackio_dir.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
    assert not (tmp_path / "trackio").exists() and not (tmp_path / "store" / "tracking").exists()


def test_trackio_gets_an_rl_runs_reward_and_entropy(
    trackio_dir: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GRPO's ``report_to`` reaches the step's Trackio run too: one reward and entropy point per step."""
    monkeypatch.chdir(tmp_path)
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("converted", "coa", {"test": 1})
    writer.write_table("rl_prompts", prompts_table(4), schemas.RL_PROMPT)
    converted = writer.commit()
    config = RLStageConfig(
        max_steps=2, prompts_per_step=2, group_size=2, steps_per_generation=1, save_steps=2,
        max_turns=2, max_new_tokens=12, max_total_tokens=24, overlong_buffer=8, entropy_floor=None,
        launcher="in_process", tools=ToolsConfig(enabled=("code",), record="off"), logging_steps=1,
    )  # fmt: skip
    project = f"coa-rl-{uuid.uuid4().hex[:8]}"
    tracker = TrackingConfig(backend="trackio", experiment=project, log_dir=str(trackio_dir))
    step = rl_step.step(config, ModelInput(external=str(tiny_model)), TableInput(converted, "rl_prompts"))
    with tracking.activate(tracker):
        built = run_step(step, store)
    name = io.read_lineage(built.ref)["tracker"]["name"]
    assert name == f"rl/{built.ref.uri.rsplit('/', 1)[-1]}"
    run = trackio_cli(trackio_dir, "get", "run", "--project", project, "--run", name)
    for key in ("train/reward", "train/entropy"):
        assert key in run["metrics"], run["metrics"]
        got = trackio_cli(trackio_dir, "get", "metric", "--project", project, "--run", name, "--metric", key)
        values = [v["value"] for v in got["values"]]
        assert len(values) == 2 and all(math.isfinite(v) for v in values), (key, values)
    assert run["config"]["coa.artifact_uri"] == built.ref.uri
    assert run["config"]["learning_rate"] == config.learning_rate  # GRPO's arguments, kept


def test_trackio_run_gets_tags_and_text_without_secrets(
    trackio_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's tags and summary text pass the scrubber: a secret env value and URI credentials."""
    monkeypatch.setenv("COA_TEST_API_KEY", SECRET)
    project = f"coa-secrets-{uuid.uuid4().hex[:8]}"
    config = TrackingConfig(backend="trackio", experiment=project, log_dir=str(trackio_dir))
    upstream = ["https://bob:pa55word@host/x", f"s3://b/{SECRET}/y"]
    summary = {"headline": f"judged with key {SECRET}", "metrics": {"all": {"pass@1": 0.25}}}
    with (
        tracking.activate(config),
        tracking.step_run("evaluate", "file:///s/eval-abc", upstream, None) as run,
    ):
        assert run is not None and os.environ["TRACKIO_DIR"] == str(trackio_dir)
        tracking.log_summary(run, summary)
    got = trackio_cli(trackio_dir, "get", "run", "--project", project, "--run", "evaluate/eval-abc")
    assert got["config"]["coa.upstream.0"] == "https://***@host/x"
    assert got["config"]["coa.upstream.1"] == "s3://b/***/y"
    assert got["config"]["coa.headline"] == "judged with key ***"
    assert got["metrics"] == ["metrics/all/pass_at_1"]
    for path in trackio_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes() and b"pa55word" not in path.read_bytes(), path


def test_trackio_refuses_a_second_folder_in_one_process(trackio_dir: Path, tmp_path: Path) -> None:
    """This process's Trackio writes to ``trackio_dir``: a step that wants another folder is refused."""
    elsewhere = TrackingConfig(backend="trackio", log_dir=str(tmp_path / "other"))
    with (
        tracking.activate(elsewhere),
        pytest.raises(tracking.TrackingUnavailable, match="use one tracking.log_dir per process"),
        tracking.step_run("sft", "file:///s/model-abc", [], None),
    ):
        pass
