"""orchestration/outcome.py in process: the engine's crash record for a flow run ended Failed by its own
state is dropped; a flow that raises a bug keeps it (the worker path is tests/flows/test_failed_step.py).

``run_flow(..., error_logger=...)`` is how Prefect's engine runs a worker's flow run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prefect import flow
from prefect.flow_engine import run_flow
from prefect.testing.utilities import prefect_test_harness

from coa.errors import UserError
from orchestration.outcome import ENGINE_LINE, failed, quiet_failed_states


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
