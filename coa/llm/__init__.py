"""The LLM layer used by the multi-agent teacher: OpenAI-compatible chat endpoints with limits,
retries, a run-wide budget, a content-addressed response cache, and secret hygiene.

Typical use::

    from coa.llm import LLMConfig, LLMRouter

    async with LLMRouter(cfg.llm) as llm:
        result = await llm.chat("teacher", [{"role": "user", "content": "2+2?"}], sample_id=rollout)
        if result.truncated: ...

Modules: :mod:`~coa.llm.config` (typed config), :mod:`~coa.llm.client` (client, result),
:mod:`~coa.llm.router` (the clients of a run, by role),
:mod:`~coa.llm.transport` (responses, retries, proxies), :mod:`~coa.llm.cache` (response cache),
:mod:`~coa.llm.limits` (token buckets, budget), :mod:`~coa.llm.tokens` (token counting),
:mod:`~coa.llm.secrets` (API keys, scrubbing), :mod:`~coa.llm.errors`. Nothing here imports Prefect:
``api_key_block`` is read by the reader the Prefect layer installs
(:func:`~coa.llm.secrets.set_secret_block_reader`, :mod:`tasks.secret_blocks`).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coa.llm.cache import ResponseCache, cache_key
    from coa.llm.client import ChatResult, ClientStats, LLMClient
    from coa.llm.errors import (
        BudgetExhausted,
        ContextLengthExceeded,
        LLMError,
        LLMRequestError,
        LLMRetriesExhausted,
    )
    from coa.llm.limits import AsyncTokenBucket, Budget, Reservation
    from coa.llm.router import LLMRouter
    from coa.llm.secrets import Scrubber, resolve_api_key, set_secret_block_reader
    from coa.llm.tokens import TokenCounter, approx_token_count, estimate_prompt_tokens, hf_token_counter
    from coa.llm.transport import is_context_length_error, parse_retry_after
from coa.llm.config import ROLES, EndpointConfig, LLMConfig, Role

__all__ = [
    "ROLES",
    "AsyncTokenBucket",
    "Budget",
    "BudgetExhausted",
    "ChatResult",
    "ClientStats",
    "ContextLengthExceeded",
    "EndpointConfig",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMRequestError",
    "LLMRetriesExhausted",
    "LLMRouter",
    "Reservation",
    "ResponseCache",
    "Role",
    "Scrubber",
    "TokenCounter",
    "approx_token_count",
    "cache_key",
    "estimate_prompt_tokens",
    "hf_token_counter",
    "is_context_length_error",
    "parse_retry_after",
    "resolve_api_key",
    "set_secret_block_reader",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in ("ResponseCache", "cache_key"):
        from coa.llm import cache

        return getattr(cache, name)
    if name in ("ChatResult", "ClientStats", "LLMClient"):
        from coa.llm import client

        return getattr(client, name)
    if name in (
        "BudgetExhausted",
        "ContextLengthExceeded",
        "LLMError",
        "LLMRequestError",
        "LLMRetriesExhausted",
    ):
        from coa.llm import errors

        return getattr(errors, name)
    if name in ("AsyncTokenBucket", "Budget", "Reservation"):
        from coa.llm import limits

        return getattr(limits, name)
    if name in ("LLMRouter",):
        from coa.llm import router

        return getattr(router, name)
    if name in ("Scrubber", "resolve_api_key", "set_secret_block_reader"):
        from coa.llm import secrets

        return getattr(secrets, name)
    if name in ("TokenCounter", "approx_token_count", "estimate_prompt_tokens", "hf_token_counter"):
        from coa.llm import tokens

        return getattr(tokens, name)
    if name in ("is_context_length_error", "parse_retry_after"):
        from coa.llm import transport

        return getattr(transport, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
