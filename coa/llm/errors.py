"""Errors of the LLM layer. Every message is scrubbed of secrets before it is raised.

- :class:`BudgetExhausted`: the run budget would be exceeded; raised *before* the call, so a
  collector can stop cleanly (nothing was sent, nothing was spent).
- :class:`ContextLengthExceeded`: the prompt (plus max_tokens) does not fit the model; never retried,
  the caller records it as an error step.
- :class:`LLMRequestError`: any other 4xx that cannot succeed on retry (bad key, bad request, ...).
- :class:`LLMRetriesExhausted`: a retryable failure (429, 5xx, timeout, connection, malformed body)
  persisted through every retry.
"""

from __future__ import annotations

from coa.errors import InfraError


class LLMError(InfraError, RuntimeError):
    """Base class of the LLM layer's errors."""


class BudgetExhausted(LLMError):
    """The next call could exceed the run's token or USD budget; it was not sent."""


class LLMRequestError(LLMError):
    """The server refused the request with a status that retrying cannot fix."""

    def __init__(self, message: str, *, status: int, endpoint: str) -> None:
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint


class ContextLengthExceeded(LLMRequestError):
    """The prompt plus the completion cap exceed the model's context window."""


class LLMRetriesExhausted(LLMError):
    """Every attempt failed with a retryable error."""

    def __init__(self, message: str, *, attempts: int, endpoint: str, last_error: str) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.endpoint = endpoint
        self.last_error = last_error
