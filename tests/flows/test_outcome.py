"""tasks/outcome.py in process: the engine's crash record for a flow run ended Failed by its own
state is dropped; a flow that raises a bug keeps it (the worker path is tests/flows/test_failed_step.py);
a project error raised anywhere in a flow body ends the run Failed with its one-line reason.

``run_flow(..., error_logger=...)`` is how Prefect's engine runs a worker's flow run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect import flow, get_run_logger
from prefect.flow_engine import run_flow
from prefect.testing.utilities import prefect_test_harness

from coa.errors import CheckFailed, UserError
from tasks.outcome import ENGINE_LINE, failed, project_errors_fail, quiet_failed_states

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prefect_harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=120):
        yield


@flow(name="outcome-fails")
def fails_with_a_reason() -> Any:
    quiet_failed_states()
    return failed(UserError("configs/x.yaml: invalid configuration (1 problem(s)):\n  - sft.x: unknown key"))


@flow(name="outcome-bug")
def crashes() -> Any:
    quiet_failed_states()
    raise RuntimeError("a bug")


def _gate(night: str) -> None:
    """A helper deep in a flow body that stops on a project error (its message on two lines)."""
    raise CheckFailed(f"night {night}: the champion changed while the candidate was gated\n(gate it again)")


@flow(name="outcome-project-error")
@project_errors_fail
def stops_in_its_body(night: str = "2026-11-25", models: list[str] | None = None) -> Any:
    get_run_logger().info("night %s", night)
    _gate(night)
    return "unreachable"


@flow(name="outcome-wrapped-bug")
@project_errors_fail
def wrapped_bug() -> Any:
    raise RuntimeError("a bug")


class Records(logging.Handler):
    """What reaches the handlers of Prefect's flow-run logger (its filters have run by then)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def engine(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.getMessage() == ENGINE_LINE]


@pytest.fixture
def caught() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("prefect.flow_runs")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_a_failed_state_is_not_logged_as_a_crash_a_bug_is(prefect_harness: None, caught: Records) -> None:
    engine_log = logging.getLogger("prefect.flow_runs")  # the logger the worker's engine hands run_flow
    with pytest.raises(Exception, match="input error: configs/x.yaml: invalid configuration") as raised:
        run_flow(fails_with_a_reason, error_logger=engine_log)  # type: ignore[arg-type]
    assert type(raised.value).__name__ == "FailedRun"  # the engine re-raises the state it set
    assert "\n" not in str(raised.value)  # the state's message: one line
    assert not caught.engine()
    assert any(r.getMessage().startswith("input error: configs/x.yaml") for r in caught.records)

    caught.records.clear()
    with pytest.raises(RuntimeError, match="a bug"):
        run_flow(crashes, error_logger=engine_log)  # type: ignore[arg-type]
    (record,) = caught.engine()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)  # kept, traceback too


def test_a_project_error_anywhere_in_a_flow_body_ends_the_run_failed_with_one_line(
    prefect_harness: None, caught: Records
) -> None:
    assert set(stops_in_its_body.parameters.properties) == {"night", "models"}  # Prefect sees the body's
    engine_log = logging.getLogger("prefect.flow_runs")
    with pytest.raises(Exception, match="check failed: night 2026-11-26: the champion changed") as raised:
        run_flow(stops_in_its_body, parameters={"night": "2026-11-26"}, error_logger=engine_log)  # type: ignore[arg-type]
    assert type(raised.value).__name__ == "FailedRun"
    assert not caught.engine()  # no crash record, no traceback
    state = stops_in_its_body(night="2026-11-27", return_state=True)
    assert state.is_failed() and state.message == (
        "check failed: night 2026-11-27: the champion changed while the candidate was gated (gate it again)"
    )
    caught.records.clear()
    with pytest.raises(RuntimeError, match="a bug"):  # not a project error: a bug, kept as a crash
        run_flow(wrapped_bug, error_logger=engine_log)  # type: ignore[arg-type]
    (record,) = caught.engine()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


def test_the_pipeline_flow_fails_with_the_reason_of_an_error_after_its_config_loaded(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch, storage_root: Path
) -> None:
    """``--only`` naming no stage of the plan is found while the flow runs (after the plan is made)."""
    from flows.pipeline import pipeline

    monkeypatch.chdir(REPO)
    state = pipeline(config_path="configs/demo.yaml", only=["nope"], return_state=True)
    assert state.is_failed()
    assert state.message.startswith("input error: --only nope: no such stage in the plan (synthetic, ")
    assert "\n" not in state.message
