"""The clients of a run: :class:`LLMRouter` builds one :class:`~coa.llm.client.LLMClient` per endpoint
of an :class:`~coa.llm.config.LLMConfig` and sends each call to the endpoint of its role.

Roles sharing an endpoint share its client (so its limits); every client draws on one run-wide
:class:`~coa.llm.limits.Budget` and one :class:`~coa.llm.cache.ResponseCache`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from coa.llm.cache import ResponseCache
from coa.llm.client import ChatResult, LLMClient, Message
from coa.llm.config import LLMConfig
from coa.llm.limits import Budget
from coa.llm.tokens import TokenCounter


class LLMRouter:
    """The clients of a run: one per endpoint, shared by the roles using it, one budget, one cache."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        cache: ResponseCache | None = None,
        budget: Budget | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.config = config
        self.budget = budget or Budget(config.budget_tokens, config.budget_usd)
        self.cache = (cache or ResponseCache(config.cache_root)) if config.cache else None
        self.clients = {
            e.name: LLMClient(e, budget=self.budget, cache=self.cache, token_counter=token_counter)
            for e in config.endpoints
        }

    def client(self, role_or_name: str) -> LLMClient:
        """The client of an endpoint, by role (teacher/judge/summariser) or endpoint name."""
        return self.clients[self.config.endpoint(role_or_name).name]

    async def chat(self, role_or_name: str, messages: Sequence[Message], **kwargs: Any) -> ChatResult:
        """:meth:`LLMClient.chat` on the endpoint of a role (or an endpoint name)."""
        return await self.client(role_or_name).chat(messages, **kwargs)

    def summary(self) -> dict[str, Any]:
        """Budget and per-endpoint counters."""
        return {
            "budget": self.budget.summary(),
            "endpoints": {name: dataclasses.asdict(c.stats) for name, c in self.clients.items()},
        }

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients.values()))

    async def __aenter__(self) -> LLMRouter:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()
