"""A dispatched step whose child run crashed is sent again, a bounded number of times; the warning
names the checkpoint the retry resumes from, read from disk. A child whose heartbeats stop while it is
Running is marked Crashed by the parent's watch and sent again; a child still queued never is (the
Prefect side is faked here; the real server's runs are tests/flows/test_nightly_pool.py and
tests/flows/test_worker_killed.py)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from prefect.client.schemas.objects import FlowRun, State
from prefect.client.schemas.responses import OrchestrationResult, SetStateStatus, StateAcceptDetails
from prefect.states import Completed, Crashed, Running, Scheduled

from coa import heartbeat, io
from coa.plan.config import DispatchConfig
from coa.plan.spec import spec_of
from coa.steps import StepResult, resolve, run_step
from coa.synthetic import SyntheticConfig
from coa.synthetic import step as synthetic_step
from tasks import dispatch

STEP = synthetic_step.step(SyntheticConfig(train={"arithmetic": 2}, heldout={"arithmetic": 1}))
FAST = DispatchConfig(mode="deployment", heartbeat_s=0.05, heartbeat_timeout_s=0.3)


class _Client:
    """The parent's Prefect client: reads the runs the fake ``run_deployment`` made, sets states."""

    def __init__(self, runs: dict[uuid.UUID, FlowRun]) -> None:
        self.runs = runs
        self.set: list[tuple[uuid.UUID, State[Any]]] = []

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def read_flow_run(self, run_id: uuid.UUID) -> FlowRun:
        return self.runs[run_id]

    def set_flow_run_state(self, run_id: uuid.UUID, state: State[Any]) -> OrchestrationResult[Any]:
        self.set.append((run_id, state))
        self.runs[run_id].state = state
        return OrchestrationResult(status=SetStateStatus.ACCEPT, state=state, details=StateAcceptDetails())


def _fake(
    monkeypatch: pytest.MonkeyPatch, crashes: int, silent: int = 0, config: DispatchConfig = FAST
) -> tuple[list[str], _Client]:
    """``crashes`` first runs crash (their process died: the worker reports it), then ``silent`` runs
    stay Running after one beat (their worker died: nobody reports), then one builds the step."""
    sent: list[str] = []
    client = _Client({})

    def run_deployment(
        deployment: str, parameters: dict[str, Any], timeout: Any, flow_run_name: str
    ) -> FlowRun:
        assert timeout == 0 and parameters["heartbeat_s"] == config.heartbeat_s  # launched, then watched
        sent.append(flow_run_name)
        run = FlowRun(name=flow_run_name, flow_id=uuid.uuid4(), state=Running())
        if len(sent) <= crashes:  # the worker's process died mid-build
            run.state = Crashed(message="Flow run infrastructure exited with non-zero status code -9.")
        elif len(sent) <= crashes + silent:  # it beat once, then its machine was lost
            heartbeat.Heartbeat(io.Store(), str(run.id), config.heartbeat_s).beat()
        else:  # the retry builds it, as the gpu worker would
            run_step(STEP, io.Store())
            run.state = Completed()
        client.runs[run.id] = run
        return run

    monkeypatch.setattr(dispatch, "run_deployment", run_deployment)
    monkeypatch.setattr(dispatch, "get_client", lambda sync_client: client)
    monkeypatch.setattr(dispatch, "get_run_logger", lambda: logging.getLogger("coa.test.dispatch"))
    return sent, client


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
    sent, _ = _fake(monkeypatch, crashes=1)
    folder = _checkpoint(4)
    with caplog.at_level(logging.WARNING, logger="coa.test.dispatch"):
        result = dispatch.run_on_pool(STEP, {}, FAST)
    assert isinstance(result, StepResult) and io.lookup(result.ref.uri) is not None
    assert sent == ["run/synthetic", "run/synthetic/retry-1"]
    said = " ".join(caplog.text.split())
    assert f"retry 1 of 2: it resumes from checkpoint 4 ({folder})" in said, said


def test_a_child_that_keeps_crashing_fails_after_the_bounded_retries(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent, _ = _fake(monkeypatch, crashes=5)
    folder = _checkpoint(4)
    message = dispatch.run_on_pool(STEP, {}, FAST.model_copy(update={"crash_retries": 2}))
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
    sent, _ = _fake(monkeypatch, crashes=1, config=never)
    message = dispatch.run_on_pool(STEP, {}, never)
    assert sent == ["run/synthetic"] and isinstance(message, str)  # not sent again
    assert "crashed while building synthetic" in message and "retries)" not in message


def test_a_running_child_whose_heartbeats_stop_is_crashed_by_the_parent_and_sent_again(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sent, client = _fake(monkeypatch, crashes=0, silent=1)
    folder = _checkpoint(4)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="coa.test.dispatch"):
        result = dispatch.run_on_pool(STEP, {}, FAST)
    assert isinstance(result, StepResult) and sent == ["run/synthetic", "run/synthetic/retry-1"]
    assert time.monotonic() - started < 5  # the watch's timeout (0.3 s) and a poll, not Prefect's 90 s
    [(dead, state)] = client.set  # the silent run, marked Crashed through the API with the reason
    assert dead == next(iter(client.runs)) and state.is_crashed(), client.set
    assert "no heartbeat for 0 s (last beat 0 at " in str(state.message) and "dead after 0.3 s" in str(
        state.message
    )
    said = " ".join(caplog.text.split())
    assert "run/synthetic crashed (no heartbeat for" in said
    assert f"retry 1 of 2: it resumes from checkpoint 4 ({folder})" in said, said
    assert heartbeat.read_beat(io.Store(), str(dead)) is None  # its lease is removed once declared dead


def _runs_through(monkeypatch: pytest.MonkeyPatch, states: list[State[Any]]) -> tuple[FlowRun, _Client]:
    """A child whose state, read at each poll, is the next of ``states`` (the last one stays)."""
    run = FlowRun(name="run/sft", flow_id=uuid.uuid4(), state=states[0])
    client = _Client({run.id: run})
    reads = iter(states)

    def read_flow_run(run_id: uuid.UUID) -> FlowRun:
        run.state = next(reads, run.state)
        return run

    monkeypatch.setattr(client, "read_flow_run", read_flow_run)
    return run, client


def test_a_queued_child_is_never_declared_dead(storage_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting for the GPU's concurrency slot (Scheduled) for many heartbeat timeouts is not death."""
    waiting: State[Any] = Scheduled(name="AwaitingConcurrencySlot")
    run, client = _runs_through(monkeypatch, [waiting] * 30 + [Completed()])  # 30 polls of 0.05 s: 1.5 s
    state = dispatch.watch_run(client, run, io.Store(), FAST)  # type: ignore[arg-type]
    assert state is not None and state.is_completed() and client.set == []


def test_a_dead_runs_stale_lease_is_never_read_as_its_retrys(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases are keyed by the flow run: a retry that beats lives although the dead run's lease is
    stale; a retry that never beats is dead although another run's lease is fresh."""
    store = io.Store()
    heartbeat.Heartbeat(store, str(uuid.uuid4()), 1).beat()  # the killed run's lease, left behind
    alive, client = _runs_through(monkeypatch, [Running()] * 20 + [Completed()])  # 1 s, beating
    with heartbeat.Heartbeat(store, str(alive.id), FAST.heartbeat_s):
        state = dispatch.watch_run(client, alive, store, FAST)  # type: ignore[arg-type]
    assert state is not None and state.is_completed() and client.set == []
    assert heartbeat.read_beat(store, str(alive.id)) is None  # a run that ends removes its lease
    silent, client = _runs_through(monkeypatch, [Running()] * 40 + [Completed()])
    with heartbeat.Heartbeat(store, str(uuid.uuid4()), FAST.heartbeat_s):  # another run beating
        state = dispatch.watch_run(client, silent, store, FAST)  # type: ignore[arg-type]
    assert state is not None and state.is_crashed(), state
    assert "no heartbeat in the 0 s since it started running" in str(state.message)


def test_the_heartbeat_keys_are_dispatch_config_keys() -> None:
    from coa.config import ConfigError
    from coa.plan import load_pipeline_config

    repo = Path(__file__).resolve().parents[2]
    d = load_pipeline_config(repo / "configs/demo.yaml").dispatch
    assert (d.heartbeat_s, d.heartbeat_timeout_s) == (10, 60)
    with pytest.raises(ConfigError, match=r"heartbeat_timeout_s \(15\) must be at least twice"):
        load_pipeline_config(repo / "configs/demo.yaml", ["dispatch.heartbeat_timeout_s=15"])
