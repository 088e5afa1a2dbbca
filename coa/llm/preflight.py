"""Check an endpoint before a stage's first run: one short request, no retries, seconds not minutes.

A stage that calls an OpenAI-compatible endpoint (the collection's teacher) calls
:func:`check_endpoints` before it starts: an endpoint that is unreachable, or that answers but not
with chat completions (wrong URL, wrong protocol, a bad key), fails the stage at once with an
:class:`EndpointUnusable` (exit 3) naming the endpoint and the fix, instead of after every run has
spent its retries. The check sends one tiny request (a few tokens, outside the run's budget and
cache); whether the model then follows the agents' text protocol is the runs' business: a model
that answers off-protocol fails its runs (data), never the stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from coa.errors import InfraError
from coa.llm.client import LLMClient
from coa.llm.config import EndpointConfig
from coa.llm.errors import LLMError, LLMRequestError, LLMRetriesExhausted

PROBE = [{"role": "user", "content": "Reply with the word OK."}]
"""The probe's one message: any chat-completions server answers it."""


class EndpointUnusable(InfraError, RuntimeError):
    """An endpoint failed its check before the stage started (unreachable, wrong protocol, refused)."""


async def check_endpoint(endpoint: EndpointConfig, *, what: str, fix: str, timeout_s: float = 5.0) -> None:
    """One request to ``endpoint`` (no retries, at most ``timeout_s``); raises :class:`EndpointUnusable`.

    ``what`` names the endpoint's use (``teacher``), ``fix`` the setting that names it
    (``collect.llm.endpoints``); the message points at its declaration, ``endpoints.NAME``."""
    fix = f"endpoints.{endpoint.name} (named by {fix})"
    probe = endpoint.model_copy(
        update={
            "max_retries": 0,
            "timeout_s": min(endpoint.timeout_s, timeout_s),
            "connect_timeout_s": min(endpoint.connect_timeout_s, timeout_s),
            "requests_per_minute": None,
            "tokens_per_minute": None,
        }
    )
    where = f"{what} endpoint {endpoint.name!r} ({probe.resolved_base_url()}, model {endpoint.model})"
    async with LLMClient(probe) as client:
        try:
            await client.chat(PROBE, max_tokens=4, temperature=0.0, use_cache=False)
        except LLMRetriesExhausted as e:
            raise EndpointUnusable(
                f"{where} failed its check before the first run: {e.last_error}; start the server or fix "
                f"its base_url in {fix}, then rerun the same command"
            ) from None
        except LLMRequestError as e:
            raise EndpointUnusable(
                f"{where} refused the check before the first run (HTTP {e.status}): it does not serve "
                f"OpenAI chat completions for this model and key; fix base_url, model or api_key_env in "
                f"{fix}, then rerun the same command"
            ) from None
        except LLMError as e:
            raise EndpointUnusable(
                f"{where} failed its check before the first run: {e}; fix it in {fix} and rerun"
            ) from None


async def check_endpoints(
    endpoints: Iterable[EndpointConfig], *, what: str, fix: str, timeout_s: float = 5.0
) -> None:
    """:func:`check_endpoint` on each endpoint, all at once (the first failure is raised)."""
    await asyncio.gather(*(check_endpoint(e, what=what, fix=fix, timeout_s=timeout_s) for e in endpoints))
