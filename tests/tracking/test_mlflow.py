"""Tracking against a real MLflow server: an SFT run's loss curve, an evaluation's metrics, the
registry mirror (the champion alias moves on a promotion, a refused candidate leaves it, a rollback
moves it back), a tracker that is down; and ``tracking: none`` writing nothing anywhere."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import schemas
from coa import io, tracking
from coa.cli import app
from coa.curate import step as curate_step
from coa.curate.config import CurateConfig
from coa.evaluate import step as eval_step
from coa.registry.store import Registry
from coa.steps import ModelInput, TableInput, run_step
from coa.tools.config import ToolsConfig
from coa.tracking.config import TrackingConfig
from coa.train import step as sft_step
from coa.train.step import read_result
from tests.conftest import TRACKIO_HOME

from .conftest import free_port
from .inputs import EVAL, SFT, write_converted, write_tasks


def test_mlflow_gets_the_sft_curve_the_eval_metrics_and_the_registry(
    mlflow_server: str,
    tiny_model: Path,
    sft_rows: pa.Table,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COA_TEST_API_KEY", "sk-do-not-log-me")  # a secret in the environment
    client = MlflowClient(mlflow_server, registry_uri=mlflow_server)
    store = io.Store(str(tmp_path / "store"))
    converted = write_converted(store, sft_rows)
    config = TrackingConfig(backend="mlflow", uri=mlflow_server, experiment="coa-test")
    with tracking.activate(config):
        base = ModelInput(external=str(tiny_model))
        sft = run_step(sft_step.step(SFT, base, TableInput(converted, "sft")), store)
        model = ModelInput(ref=sft.ref)
        tools = ToolsConfig(enabled=("code",), record="off")
        evaluated = run_step(
            eval_step.step(EVAL, tools, TableInput(write_tasks(store), "heldout"), model), store
        )
    assert tracking.ENV not in os.environ  # activate() restores the environment

    # the SFT run: named by the step and its content key, tagged with its artifact and upstream,
    # named back by the lineage, holding the trainer's loss curve step by step
    tracker = io.read_lineage(sft.ref)["tracker"]
    run = client.get_run(tracker["run_id"])
    assert tracker["backend"] == "mlflow" and tracker["location"] == mlflow_server
    assert run.info.run_name == f"sft/{sft.ref.uri.rsplit('/', 1)[-1]}" == tracker["name"]
    assert run.info.status == "FINISHED"
    assert run.data.tags["coa.artifact_uri"] == sft.ref.uri
    assert run.data.tags["coa.upstream.0"] == converted.uri
    curve = read_result(sft.ref).loss_curve
    history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
    assert len(history) == len(curve) == 4
    assert [s for s, _ in history] == [s for s, _ in curve]
    assert all(math.isclose(v, w, rel_tol=1e-6) for (_, v), (_, w) in zip(history, curve, strict=True))
    assert run.data.params["learning_rate"] == str(SFT.learning_rate)  # the trainer's own integration

    # the evaluation's run: its metrics (pass@1 ± SE, pass@k, maj@K, tokens per task) as measured
    eval_run = client.get_run(io.read_lineage(evaluated.ref)["tracker"]["run_id"])
    assert eval_run.data.tags["coa.upstream.1"] == sft.ref.uri or sft.ref.uri in eval_run.data.tags.values()
    family = evaluated.summary["metrics"]["all"]
    logged = eval_run.data.metrics
    for key in ("pass@1", "pass@1_se", "tokens_per_task", "n"):
        assert logged[f"metrics/all/{key.replace('@', '_at_')}"] == pytest.approx(float(family[key]))
    assert any(k.startswith("metrics/all/maj_at_") for k in logged)
    assert "coa.headline" in eval_run.data.tags
    every = {**run.data.params, **run.data.tags, **eval_run.data.params, **eval_run.data.tags}
    assert not any("sk-do-not-log-me" in str(v) for v in every.values())

    # the registry mirror: a promotion moves the alias, a refused candidate leaves it, a rollback moves it
    registry = Registry()  # under the test's storage root, as the CLI finds it
    student = ModelInput(external=str(tiny_model)).local_path()
    yes = {"promote": True, "reasons": ["beats the champion"], "checks": {"lineage": True}}
    no = {"promote": False, "reasons": ["math: -0.10 pass@1"], "checks": {"lineage": True}}
    with tracking.activate(config):
        registry.promote("coa-agent", student, yes, reasons=["first champion"])
        first = client.get_model_version_by_alias("coa-agent", "champion")
        registry.promote("coa-agent", sft.ref.uri, yes, reasons=["beats the champion"])
        champion = client.get_model_version_by_alias("coa-agent", "champion")
        registry.record("coa-agent", evaluated.ref.uri, no, reasons=["math: -0.10 pass@1"])
        after_refusal = client.get_model_version_by_alias("coa-agent", "champion")
    # the operator's rollback from the command line, with the profile that names the tracker
    profile = tmp_path / "tracked.yaml"
    profile.write_text(f"tracking:\n  backend: mlflow\n  uri: {mlflow_server}\n  experiment: coa-test\n")
    monkeypatch.delenv(tracking.ENV, raising=False)  # the CLI activates the profile's tracking: undo after
    cli = CliRunner().invoke(
        app, ["models", "rollback", "coa-agent", "--reason", "bad answers in production", "-c", str(profile)]
    )
    assert cli.exit_code == 0, cli.output
    rolled = client.get_model_version_by_alias("coa-agent", "champion")
    assert first.tags["coa.model_uri"] == student and first.tags["coa.verdict"] == "promote"
    assert champion.tags["coa.model_uri"] == sft.ref.uri and champion.version != first.version
    assert champion.run_id == tracker["run_id"]  # the version links to the run that trained it
    assert after_refusal.version == champion.version  # the refused candidate did not move the alias
    versions = client.search_model_versions("name='coa-agent'")
    refused = [v for v in versions if v.tags.get("coa.verdict") == "refuse"]
    assert len(refused) == 1 and refused[0].tags["coa.reasons"] == "math: -0.10 pass@1"
    assert refused[0].tags["coa.model_uri"] == evaluated.ref.uri
    assert rolled.version == first.version and rolled.tags["coa.event"] == "rollback"
    assert registry.champion("coa-agent").model_uri == student  # ours agrees (source of truth)

    # a tracker that is down: our registry still records the promotion, one warning, in seconds
    down = TrackingConfig(backend="mlflow", uri=f"http://127.0.0.1:{free_port()}", experiment="coa-test")
    caplog.set_level(logging.WARNING, logger="coa.tracking.mirror")
    started = time.monotonic()
    with tracking.activate(down):
        registry.promote("coa-agent", sft.ref.uri, yes, reasons=["tracker down"])
    assert registry.champion("coa-agent").model_uri == sft.ref.uri
    assert time.monotonic() - started < 120
    assert [r for r in caplog.records if "MLflow registry mirror skipped" in r.getMessage()]
    assert client.get_model_version_by_alias("coa-agent", "champion").version == first.version

    # a step with the tracker down fails in one line, naming the fix, and commits nothing
    with tracking.activate(down), pytest.raises(tracking.TrackingUnavailable, match="tracking.backend: none"):
        shorter = SFT.model_copy(update={"max_steps": 2})
        run_step(sft_step.step(shorter, model, TableInput(converted, "sft")), store)


def test_tracking_none_writes_nothing_anywhere(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_RUN_ID",
        "TENSORBOARD_LOGGING_DIR",
        "TRACKIO_DIR",
        tracking.ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    trackio_home = Path(TRACKIO_HOME)  # where this process's Trackio writes (tests/conftest.py)
    before = sorted((p, p.stat().st_mtime_ns) for p in trackio_home.rglob("*"))
    store = io.Store(str(tmp_path / "store"))
    converted = write_converted(store, sft_rows)
    with tracking.activate(TrackingConfig()):
        assert tracking.ENV not in os.environ
        small = SFT.model_copy(update={"max_steps": 2, "save_steps": 2})
        base = ModelInput(external=str(tiny_model))
        built = run_step(sft_step.step(small, base, TableInput(converted, "sft")), store)
    assert "tracker" not in io.read_lineage(built.ref)
    assert list(cwd.iterdir()) == []  # no mlruns/, runs/, wandb/ in the working folder
    made = {p.name for p in (tmp_path / "store").rglob("*")}
    assert not made & {"mlruns", "runs", "wandb", "tracking", "trackio"}
    assert not [p for p in (tmp_path / "store").rglob("events.out.tfevents*")]
    assert sorted((p, p.stat().st_mtime_ns) for p in trackio_home.rglob("*")) == before


def test_a_chosen_tracker_that_is_not_installed_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # trackio's module under a name no environment has: the check must not depend on what is installed here
    monkeypatch.setitem(tracking.PACKAGES, "trackio", ("coa_test_no_such_module", "trackio"))
    with pytest.raises(tracking.TrackingUnavailable, match=r"pip install 'trackio'"):
        tracking.require("trackio")
    tracking.require("none")
    tracking.require("mlflow")  # installed (pinned in pyproject)


def test_mlflow_gets_the_curation_gate_and_row_counts(
    mlflow_server: str,
    teacher_runs: list[dict[str, Any]],
    synthetic_tasks: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("trajectories", "t", {"rows": len(teacher_runs)})
    writer.write_table("trajectories", schemas.TRAJECTORY.from_rows(teacher_runs), schemas.TRAJECTORY)
    raw = writer.commit()
    writer = store.writer("tasks", "t", {"rows": synthetic_tasks["train"].num_rows})
    writer.write_table("train", synthetic_tasks["train"], schemas.TASK)
    tasks = writer.commit()
    config = CurateConfig(dedup={"near": False}, gate={"correctness_floor": 0.3})  # type: ignore[arg-type]
    step = curate_step.step(config, TableInput(raw, "trajectories"), TableInput(tasks, "train"))
    with tracking.activate(TrackingConfig(backend="mlflow", uri=mlflow_server, experiment="coa-curate")):
        curated = run_step(step, store)
    client = MlflowClient(mlflow_server)
    run = client.get_run(io.read_lineage(curated.ref)["tracker"]["run_id"])
    assert run.data.tags["coa.artifact_uri"] == curated.ref.uri
    assert {run.data.tags["coa.upstream.0"], run.data.tags["coa.upstream.1"]} == {raw.uri, tasks.uri}
    logged = run.data.metrics
    for key in ("rows_in", "rows_kept", "rows_quarantined"):
        assert logged[key] == curated.summary[key]
    assert logged["rows_in"] == len(teacher_runs)
    assert logged["gate_success"] == 1.0 and curated.summary["gate_success"] is True
    assert {f"reasons/{k}": float(v) for k, v in curated.summary["reasons"].items()}.items() <= logged.items()
