"""What the agents need from a model: ``chat(agent, messages) -> ModelReply``.

Two implementations: :class:`coa.agents.llm_backend.EndpointBackend` (OpenAI-compatible endpoints
through :mod:`coa.llm`) and :class:`coa.agents.offline.RuleBasedBackend` (no model, for the demo).
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Protocol

from coa.errors import CoaError, InfraError

Message = dict[str, str]

current_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "coa_current_run_id", default=None
)
"""The run being solved (set by the runtime): backends use it to keep samples of one task apart."""


@dataclasses.dataclass(frozen=True)
class ModelReply:
    """One model call's output and its cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"
    cached: bool = False
    cost_usd: float | None = None


class ModelError(CoaError, RuntimeError):
    """The model answered, but not usably (off the agents' text protocol, context too long): the
    run records it as an error step and, when it ends the run, the run failed on its data; the
    endpoint works. ``kind`` is the error label (``AgentParsingError``, ``ContextLengthExceeded``)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class ModelUnavailable(ModelError, InfraError):
    """The model call itself failed (endpoint down, retries exhausted, refused): infrastructure
    (exit 3). Recorded the same way, but a collection counts it towards its failed share and its
    circuit breaker, never as the run's own failure."""

    exit_code = InfraError.exit_code


DATA_ERROR_KINDS = frozenset({"AgentParsingError", "ContextLengthExceeded"})
"""Error labels of a run that ended because of what the model answered, not because the endpoint
failed: the run failed (data), the endpoint works."""


def infra_failure(error: str | None) -> bool:
    """Whether a run that ended in status ``error`` with this ``error`` text failed on infrastructure
    (an endpoint down or refusing), not on what the model answered (:data:`DATA_ERROR_KINDS`)."""
    if not error:
        return True
    return error.split(":", 1)[0].strip() not in DATA_ERROR_KINDS


class BudgetStop(CoaError, RuntimeError):
    """The run-wide token/spend budget is exhausted: collection stops cleanly."""


class ModelBackend(Protocol):
    """The model behind every agent role (manager, search_agent, code_agent, reflector, verifier)."""

    name: str

    async def chat(self, agent: str, messages: list[Message]) -> ModelReply: ...
