"""The one error hierarchy: every failure the project raises on purpose is a :class:`CoaError`.

Three kinds, each with its exit code, mapped once in the CLI (:func:`coa.cli.main`) and once in the
Prefect layer (:mod:`tasks.run_step`):

* :class:`UserError` (exit 2): bad input, a bad config, a missing artifact; the message says what
  to change.
* :class:`CheckFailed` (exit 1): the input was read, a check on it failed (a data contract, the
  curation gate, the steps-run guard); the message names the check and where its evidence is.
* :class:`InfraError` (exit 3): something the machine must provide is missing or down (the
  sandbox, an LLM endpoint, storage, a full disk: :class:`coa.io.StorageFull`); rerun once it is
  fixed. A damaged artifact (:class:`coa.io.IntegrityError`) is a failed check (exit 1).

Domain modules subclass these (keeping a builtin base such as ``ValueError`` where callers already
catch it), so the same failure reads the same however it was started and on every rerun.
"""

from __future__ import annotations


class CoaError(Exception):
    """Base of every deliberate failure; ``exit_code`` is what the CLI exits with."""

    exit_code = 1
    kind = "error"


class UserError(CoaError):
    """Bad input or usage: a config key, a file, an artifact that does not exist."""

    exit_code = 2
    kind = "input error"


class CheckFailed(CoaError):
    """A check on the data or the run failed (contract, gate, guard)."""

    exit_code = 1
    kind = "check failed"


class InfraError(CoaError):
    """A resource the run needs is missing or unreachable (sandbox, endpoint, storage)."""

    exit_code = 3
    kind = "infrastructure error"


def describe(error: BaseException) -> str:
    """One line for a user: the kind of failure and its message (no traceback)."""
    kind = error.kind if isinstance(error, CoaError) else type(error).__name__
    message = " ".join(str(error).split()) if "\n" not in str(error) else str(error).strip()
    return f"{kind}: {message}"
