"""Typed configuration of the LLM layer: endpoints, the roles that use them, the run budget, the cache.

A config never holds a secret. An endpoint names the *environment variable* that holds its API key
(``api_key_env``) or the Prefect Secret block that does (``api_key_block``); the base URL may also
come from an environment variable (``base_url_env``), so one profile serves several deployments.

Example (YAML, under whatever section the pipeline mounts :class:`LLMConfig` at)::

    endpoints:
      - name: vllm
        base_url_env: COA_TEACHER_BASE_URL     # e.g. http://gpu-1:8000/v1
        model: Qwen/Qwen2.5-32B-Instruct
        max_concurrency: 32
      - name: openai
        base_url: https://api.openai.com/v1
        model: gpt-4.1-mini
        api_key_env: OPENAI_API_KEY
        requests_per_minute: 500
        tokens_per_minute: 200000
        price_prompt_per_1m: 0.4
        price_completion_per_1m: 1.6
    teacher: vllm
    judge: openai            # summariser: not set -> the teacher's endpoint
    budget_tokens: 50000000
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from coa.config import ConfigError, StrictModel

Role = Literal["teacher", "judge", "summariser"]
ROLES: tuple[Role, ...] = ("teacher", "judge", "summariser")

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class EndpointConfig(StrictModel):
    """One OpenAI-compatible chat-completions endpoint (vLLM, SGLang, OpenAI, a gateway, ...)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Name of this endpoint; roles refer to it, and it is part of every cache key.",
    )
    base_url: str | None = Field(
        default=None,
        description="OpenAI-style base URL including the API prefix, e.g. `http://host:8000/v1`; "
        "requests go to `{base_url}/chat/completions`. Exactly one of base_url / base_url_env.",
    )
    base_url_env: str | None = Field(
        default=None,
        pattern=_ENV_NAME,
        description="NAME of the environment variable holding the base URL (read when the client starts).",
    )
    model: str = Field(min_length=1, description="Model name sent in every request.")
    api_key_env: str | None = Field(
        default=None,
        pattern=_ENV_NAME,
        description="NAME of the environment variable holding the API key (never the key itself). "
        "Neither this nor api_key_block: no Authorization header (e.g. a local vLLM).",
    )
    api_key_block: str | None = Field(
        default=None,
        description="Name of a Prefect Secret block holding the API key (alternative to api_key_env).",
    )
    max_concurrency: int = Field(default=8, ge=1, description="Most requests in flight at once.")
    requests_per_minute: float | None = Field(
        default=None, gt=0, description="Request rate limit (token bucket); unset = unlimited."
    )
    tokens_per_minute: float | None = Field(
        default=None,
        gt=0,
        description="Token rate limit (prompt estimate + max_tokens charged before a request, "
        "reconciled with the reported usage after it); unset = unlimited.",
    )
    rate_burst_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds' worth of rate the limiters may spend at once after being idle; "
        "0 = requests evenly spaced at 60/requests_per_minute seconds.",
    )
    timeout_s: float = Field(default=300.0, gt=0, description="Wall-clock limit of one HTTP attempt.")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="Limit for opening a connection.")
    max_retries: int = Field(
        default=6,
        ge=0,
        description="Retries after the first attempt on 429, 5xx, timeouts, connection errors and "
        "malformed bodies (never on other 4xx).",
    )
    backoff_base_s: float = Field(
        default=1.0, gt=0, description="Backoff before retry n is uniform in [0, min(max, base*2^(n-1))]."
    )
    backoff_max_s: float = Field(default=60.0, gt=0, description="Upper bound of one backoff delay.")
    retry_after_max_s: float = Field(
        default=300.0, ge=0, description="Longest server-requested wait (Retry-After) that is honoured."
    )
    temperature: float | None = Field(
        default=0.7, ge=0, le=2, description="Default sampling temperature (a call may override it)."
    )
    top_p: float | None = Field(default=1.0, gt=0, le=1, description="Default nucleus-sampling top_p.")
    max_tokens: int | None = Field(
        default=4096,
        ge=1,
        description="Default completion cap. Budgets and the token limiter reserve this much per call; "
        "unset = the server's limit (then a budget can be overshot by one completion).",
    )
    price_prompt_per_1m: float | None = Field(
        default=None, ge=0, description="USD per 1M prompt tokens (for cost and budget_usd)."
    )
    price_completion_per_1m: float | None = Field(
        default=None, ge=0, description="USD per 1M completion tokens (for cost and budget_usd)."
    )
    tokenizer: str | None = Field(
        default=None,
        description="Hugging Face tokenizer name or local path used to count tokens when a reply has "
        "no usage; unset = the ~4 bytes/token approximation (coa.llm.tokens).",
    )

    @model_validator(mode="after")
    def _check(self) -> EndpointConfig:
        if (self.base_url is None) == (self.base_url_env is None):
            raise ValueError("set exactly one of base_url / base_url_env")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        if self.api_key_env and self.api_key_block:
            raise ValueError("set at most one of api_key_env / api_key_block")
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("backoff_max_s must be >= backoff_base_s")
        return self

    @property
    def priced(self) -> bool:
        return self.price_prompt_per_1m is not None and self.price_completion_per_1m is not None

    def resolved_base_url(self) -> str:
        """The base URL (from the config or its environment variable), without a trailing slash."""
        url = self.base_url
        if url is None:
            assert self.base_url_env is not None
            url = os.environ.get(self.base_url_env, "").strip()
            if not url:
                raise ConfigError(
                    f"endpoint {self.name!r}: environment variable {self.base_url_env} "
                    "(base_url_env) is not set"
                )
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"endpoint {self.name!r}: {self.base_url_env} must hold an http(s):// URL")
        return url.rstrip("/")

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Cost of a call in USD, or None when this endpoint has no prices."""
        if self.price_prompt_per_1m is None or self.price_completion_per_1m is None:
            return None
        return (
            prompt_tokens * self.price_prompt_per_1m + completion_tokens * self.price_completion_per_1m
        ) / 1e6


class LLMConfig(StrictModel):
    """The LLM endpoints of a run, which role uses which, the run-wide budget and the response cache."""

    endpoints: tuple[EndpointConfig, ...] = Field(default=(), description="Endpoints, names unique.")
    teacher: str | None = Field(
        default=None, description="Endpoint name for the teacher agents; default: the first endpoint."
    )
    judge: str | None = Field(default=None, description="Endpoint name for the judge; default: teacher's.")
    summariser: str | None = Field(
        default=None, description="Endpoint name for the summariser; default: the teacher's."
    )
    budget_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most prompt+completion tokens the whole run may spend (cache replays are free); "
        "a call that could exceed it is refused with BudgetExhausted before it is sent.",
    )
    budget_usd: float | None = Field(
        default=None, gt=0, description="Most USD the whole run may spend (needs prices on every endpoint)."
    )
    cache: bool = Field(default=True, description="Replay identical calls from the response cache.")
    cache_root: str | None = Field(
        default=None, description="Cache folder (local or s3://); default: {storage_root}/llm-cache."
    )

    @model_validator(mode="after")
    def _check(self) -> LLMConfig:
        names = [e.name for e in self.endpoints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate endpoint names: {', '.join(dupes)}")
        for role in ROLES:
            ref = getattr(self, role)
            if ref is not None and ref not in names:
                raise ValueError(
                    f"{role}: no endpoint named {ref!r} (endpoints: {', '.join(names) or 'none'})"
                )
        if self.budget_usd is not None:
            unpriced = [e.name for e in self.endpoints if not e.priced]
            if unpriced:
                raise ValueError(
                    "budget_usd needs price_prompt_per_1m and price_completion_per_1m on every endpoint "
                    f"(0 for free ones); missing on: {', '.join(unpriced)}"
                )
        return self

    def endpoint_name(self, role: Role) -> str:
        """The endpoint name a role uses (judge and summariser fall back to the teacher's)."""
        if role not in ROLES:
            raise ConfigError(f"unknown LLM role {role!r}; roles: {', '.join(ROLES)}")
        name = getattr(self, role) or self.teacher
        if name is None:
            if not self.endpoints:
                raise ConfigError("no LLM endpoints configured (llm.endpoints is empty)")
            name = self.endpoints[0].name
        return str(name)

    def endpoint(self, name_or_role: str) -> EndpointConfig:
        """An endpoint by its name, or the one a role uses."""
        name = self.endpoint_name(name_or_role) if name_or_role in ROLES else name_or_role  # type: ignore[arg-type]
        for e in self.endpoints:
            if e.name == name:
                return e
        raise ConfigError(f"no LLM endpoint named {name!r}")
