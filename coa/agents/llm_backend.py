"""The agents' model is an OpenAI-compatible endpoint, through :mod:`coa.llm` (limits, retries,
budget, cache). Errors map onto what the runtime understands: a budget stop ends collection
cleanly; a context-length error is the run's failure (:class:`ModelError`), a request that cannot
succeed an infrastructure failure (:class:`ModelUnavailable`); both are recorded as an error step."""

from __future__ import annotations

from coa.agents.backend import BudgetStop, Message, ModelError, ModelReply, ModelUnavailable, current_run_id
from coa.llm import BudgetExhausted, ContextLengthExceeded, LLMError, LLMRouter


class EndpointBackend:
    """All agent roles on the router's ``teacher`` endpoint (one sample id per run)."""

    def __init__(self, router: LLMRouter, role: str = "teacher") -> None:
        self.router = router
        self.role = role
        endpoint = router.config.endpoint(role)
        self.name = f"{endpoint.name}:{endpoint.model}"

    async def chat(self, agent: str, messages: list[Message]) -> ModelReply:
        try:
            result = await self.router.chat(self.role, messages, sample_id=current_run_id.get())
        except BudgetExhausted as e:
            raise BudgetStop(str(e)) from None
        except ContextLengthExceeded as e:
            raise ModelError("ContextLengthExceeded", str(e)) from None
        except LLMError as e:  # the endpoint failed, not the model's answer: infrastructure
            raise ModelUnavailable(type(e).__name__, str(e)) from None
        return ModelReply(
            text=result.text,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            latency_s=result.latency_s,
            finish_reason=result.finish_reason or "stop",
            cached=result.cached,
            cost_usd=result.cost_usd,
        )
