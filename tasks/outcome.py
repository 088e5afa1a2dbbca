"""How our flow runs end Failed: the one-line reason as the state message, never as a crash.

A flow ends Failed by returning ``Failed(message=…)``. Run by a worker, Prefect's engine then
re-raises the final state's :class:`~prefect.exceptions.FailedRun` after setting it and logs it as
"Engine execution exited with unexpected exception" with a traceback, as if the run had crashed
(Prefect 3.8.8, ``prefect.flow_engine.run_flow``): a dispatched step's run on the gpu pool and the
parent flow it failed both showed one. Every flow calls :func:`quiet_failed_states` first: that one
record is dropped when its exception is the ``FailedRun`` of a state the flow returned (any other
exception is a bug and keeps its traceback). :func:`failed` is how a flow stops on a project error of
its own (a bad override): the same one-line Failed state, not Prefect's "Encountered exception
during execution" traceback.

Every flow body is wrapped in :func:`project_errors_fail` (under ``@flow``): it installs the filter,
and a project error (:class:`~coa.errors.CoaError`) raised anywhere in the body (a bad profile, a
registry whose champion moved, a plan that cannot be made, a store that cannot be read) ends the run
through :func:`failed`; any other exception is a bug and stays a crash with its traceback.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import get_run_logger
from prefect.client.schemas.objects import State
from prefect.exceptions import FailedRun
from prefect.states import Failed

from coa.errors import CoaError, describe

P = ParamSpec("P")
R = TypeVar("R")

ENGINE_LINE = "Engine execution exited with unexpected exception"
"""What Prefect's engine logs, with a traceback, for a worker's flow run that did not complete."""


class FailedStateIsNotACrash(logging.Filter):
    """Drops the engine's crash record when what it carries is a Failed state's ``FailedRun``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != ENGINE_LINE or not record.exc_info:
            return True
        return not isinstance(record.exc_info[1], FailedRun)


_FILTER = FailedStateIsNotACrash()


def quiet_failed_states() -> None:
    """Install the filter on Prefect's flow-run logger in this process (once)."""
    logger = logging.getLogger("prefect.flow_runs")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def failed(error: CoaError) -> State[Any]:
    """Log a project error the flow stops on and end the run Failed with it, on one line."""
    reason = " ".join(describe(error).split())  # a config error lists its problems on lines
    get_run_logger().error("%s", reason)
    return Failed(message=reason)


def project_errors_fail(body: Callable[P, R]) -> Callable[P, R | State[Any]]:
    """A flow body whose project errors end its run Failed with the one-line reason (put under ``@flow``).

    The wrapper keeps the body's name, signature and type hints (``functools.wraps``), so Prefect
    sees the body's parameters (the deployment's parameter schema, their validation)."""

    @functools.wraps(body)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | State[Any]:
        quiet_failed_states()  # a Failed state returned by the body is its reason, not a crash
        try:
            return body(*args, **kwargs)
        except CoaError as e:
            return failed(e)

    return run
