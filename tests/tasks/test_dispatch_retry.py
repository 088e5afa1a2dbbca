"""A dispatched step whose child run crashed is sent again, a bounded number of times; the warning
names the checkpoint the retry resumes from, read from disk (the Prefect side is faked here; the real
server's run is tests/flows/test_nightly_pool.py)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from prefect.client.schemas.objects import FlowRun, State
from prefect.states import Completed, Crashed

from coa import io
from coa.plan.spec import spec_of
from coa.steps import StepResult, resolve, run_step
from coa.synthetic import SyntheticConfig
from coa.synthetic import step as synthetic_step
from tasks import dispatch

STEP = synthetic_step.step(SyntheticConfig(train={"arithmetic": 2}, heldout={"arithmetic": 1}))


def _fake(monkeypatch: pytest.MonkeyPatch, crashes: int) -> list[str]:
    sent: list[str] = []

    def run_deployment(
        deployment: str, parameters: dict[str, Any], timeout: Any, flow_run_name: str
    ) -> FlowRun:
        sent.append(flow_run_name)
        state: State[Any]
        if len(sent) <= crashes:  # the worker's process died mid-build
            state = Crashed(message="Flow run infrastructure exited with non-zero status code -9.")
        else:  # the retry builds it, as the gpu worker would
            run_step(STEP, io.Store())
            state = Completed()
        return FlowRun(name=flow_run_name, flow_id=uuid.uuid4(), state=state)

    monkeypatch.setattr(dispatch, "run_deployment", run_deployment)
    monkeypatch.setattr(dispatch, "get_run_logger", lambda: logging.getLogger("coa.test.dispatch"))
    return sent


def _checkpoint(step: int) -> Path:
    store = io.Store()
    uri = spec_of(STEP, resolve(STEP, {}), store).uri
    folder = Path(store.checkpoint_uri(uri)) / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder.parent / "checkpoint-6").mkdir()  # killed while writing: never named
    return folder


def test_a_crashed_child_is_sent_again_and_resumes(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sent = _fake(monkeypatch, crashes=1)
    folder = _checkpoint(4)
    with caplog.at_level(logging.WARNING, logger="coa.test.dispatch"):
        result = dispatch.run_on_pool(STEP, {}, "run-one-step/gpu")
    assert isinstance(result, StepResult) and io.lookup(result.ref.uri) is not None
    assert sent == ["run/synthetic", "run/synthetic/retry-1"]
    said = " ".join(caplog.text.split())
    assert f"retry 1 of 2: it resumes from checkpoint 4 ({folder})" in said, said


def test_a_child_that_keeps_crashing_fails_after_the_bounded_retries(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _fake(monkeypatch, crashes=5)
    folder = _checkpoint(4)
    message = dispatch.run_on_pool(STEP, {}, "run-one-step/gpu", crash_retries=2)
    assert len(sent) == 3 and isinstance(message, str)
    assert "crashed while building synthetic" in message and "(after 2 retries)" in message
    assert f"it resumes from checkpoint 4 ({folder})" in message


def test_crash_retries_is_the_dispatch_config_key(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.config import ConfigError
    from coa.plan import load_pipeline_config

    repo = Path(__file__).resolve().parents[2]
    assert load_pipeline_config(repo / "configs/demo.yaml").dispatch.crash_retries == 2
    with pytest.raises(ConfigError, match=r"dispatch\.crash_retries"):
        load_pipeline_config(repo / "configs/demo.yaml", ["dispatch.crash_retries=-1"])
    never = load_pipeline_config(repo / "configs/demo.yaml", ["dispatch.crash_retries=0"]).dispatch
    sent = _fake(monkeypatch, crashes=1)
    message = dispatch.run_on_pool(STEP, {}, never.deployment, crash_retries=never.crash_retries)
    assert sent == ["run/synthetic"] and isinstance(message, str)  # not sent again
    assert "crashed while building synthetic" in message and "retries)" not in message
