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


class ModelError(InfraError, RuntimeError):
    """A model call failed in a way the run records as an error step (e.g. context too long)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class BudgetStop(CoaError, RuntimeError):
    """The run-wide token/spend budget is exhausted: collection stops cleanly."""


class ModelBackend(Protocol):
    """The model behind every agent role (manager, search_agent, code_agent, reflector, verifier)."""

    name: str

    async def chat(self, agent: str, messages: list[Message]) -> ModelReply: ...
