"""Async client for OpenAI-compatible ``POST {base_url}/chat/completions`` endpoints.

One :class:`LLMClient` per endpoint; :class:`~coa.llm.router.LLMRouter` builds them from an
:class:`LLMConfig`, one per endpoint name (roles sharing an endpoint share its limits), with one
run-wide :class:`Budget` and one :class:`ResponseCache`. A call goes:

1. **cache**: the request's content hash is looked up; a hit is returned with ``cached=True``,
   costs nothing and sends nothing;
2. **budget**: the worst case (estimated prompt + max_tokens, in tokens and USD) is reserved, or
   :class:`BudgetExhausted` is raised before anything is sent;
3. **per attempt**: a concurrency slot, then the requests-per-minute and tokens-per-minute buckets,
   then the HTTP request under a wall-clock ``timeout_s``;
4. **errors**: 408/409/425/429, 5xx, timeouts, connection errors and malformed bodies are retried
   up to ``max_retries`` times with exponential backoff and full jitter, or after the server's
   ``Retry-After`` / ``retry-after-ms`` when given; a context-length 4xx raises
   :class:`ContextLengthExceeded` and any other 4xx :class:`LLMRequestError`, both at once;
5. **result**: usage from the reply (else counted with the token counter, ``usage_estimated=True``);
   ``finish_reason == "length"`` is returned with ``truncated=True``, never retried; the token bucket
   and the budget are reconciled with the real usage, and the result is cached.

Transport: an ``aiohttp.ClientSession`` directly rather than the ``openai`` SDK. The layer needs
the raw response (status, ``Retry-After`` headers, the error body to recognise context-length errors,
bodies that are not JSON) and owns retries, limits and timeouts itself; the SDK would add a second
retry and timeout policy to switch off, typed parsing that rejects the loose bodies some compatible
servers return, and exceptions to translate back. Why aiohttp and not httpx (the SDK's transport):
httpcore's connection pool rescans every connection for every queued request, so its CPU cost per
call grows with the calls in flight (9 ms a call at 64 in flight, 0.1 of the ideal throughput);
aiohttp's pool is constant-time per call and its HTTP parser is C: ~0.12 ms of transport CPU a call
at 16, 64 or 256 in flight (``bench/bench_collect.py``). The session is created on the first request
(inside the loop that uses it), its pool holds ``max_concurrency`` connections, the same bound as
the client's semaphore, so a request holding a slot never queues for a connection.

API keys live only in the ``Authorization`` header: every log line, error message, cached entry and
result text goes through a :class:`~coa.llm.secrets.Scrubber`. Create clients inside the event loop
that uses them (asyncio primitives and the connection pool belong to one loop).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, ValidationError

from coa.llm.cache import ResponseCache, cache_key
from coa.llm.config import EndpointConfig
from coa.llm.errors import ContextLengthExceeded, LLMError, LLMRequestError, LLMRetriesExhausted
from coa.llm.limits import AsyncTokenBucket, Budget
from coa.llm.secrets import Scrubber, resolve_api_key
from coa.llm.tokens import (
    TokenCounter,
    approx_token_count,
    estimate_prompt_tokens,
    hf_token_counter,
    message_text,
)
from coa.llm.transport import (
    CONTEXT_LENGTH_STATUSES,
    RETRY_STATUSES,
    RETRYABLE_TRANSPORT,
    SNIPPET,
    HTTPResponse,
    Retryable,
    env_proxy,
    error_detail,
    is_context_length_error,
    parse_retry_after,
    proxy_and_auth,
    public_url,
)

log = logging.getLogger("coa.llm")

Message = Mapping[str, Any]


class ChatResult(BaseModel):
    """One chat completion (fresh or replayed from the cache)."""

    model_config = ConfigDict(frozen=True)

    text: str
    finish_reason: str | None
    truncated: bool
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool
    latency_s: float
    cached: bool = False
    model: str
    endpoint: str
    attempts: int
    cost_usd: float | None = None
    reasoning: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclasses.dataclass
class ClientStats:
    """Counters of one client (for run reports)."""

    calls: int = 0
    cache_hits: int = 0
    requests: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LLMClient:
    """Chat completions against one endpoint, with its limits, retries, the run budget and the cache."""

    def __init__(
        self,
        endpoint: EndpointConfig,
        *,
        budget: Budget | None = None,
        cache: ResponseCache | None = None,
        token_counter: TokenCounter | None = None,
        session: aiohttp.ClientSession | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.budget = budget
        self.cache = cache
        self.stats = ClientStats()
        if token_counter is None:
            token_counter = hf_token_counter(endpoint.tokenizer) if endpoint.tokenizer else approx_token_count
        self.count_tokens: TokenCounter = token_counter
        self.base_url = endpoint.resolved_base_url()
        self._url = f"{self.base_url}/chat/completions"
        self._public_base_url = public_url(self.base_url)
        self._scrubber = Scrubber()
        self._proxy, self._proxy_auth = proxy_and_auth(env_proxy(self._url), self._scrubber)
        self._random = rng or random.Random()
        self._semaphore = asyncio.Semaphore(endpoint.max_concurrency)
        self._rpm = (
            AsyncTokenBucket.per_minute(endpoint.requests_per_minute, endpoint.rate_burst_s)
            if endpoint.requests_per_minute
            else None
        )
        self._tpm = (
            AsyncTokenBucket.per_minute(endpoint.tokens_per_minute, endpoint.rate_burst_s)
            if endpoint.tokens_per_minute
            else None
        )
        self._owns_http = session is None
        self._http: aiohttp.ClientSession | None = session
        self._request_headers: dict[str, str] = {}
        self._api_key: str | None = None
        self._key_ready = False
        self._key_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.endpoint.name

    # -- public ---------------------------------------------------------------------------------

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        sample_id: str | int | None = None,
        use_cache: bool = True,
    ) -> ChatResult:
        """One chat completion. Sampling arguments left None take the endpoint's defaults.

        ``extra_body`` adds fields to the request (e.g. vLLM's ``chat_template_kwargs``);
        ``sample_id`` is hashed into the cache key but not sent: give independent samples of the
        same prompt different ids, or they replay one another from the cache.

        Raises :class:`BudgetExhausted` (nothing sent), :class:`ContextLengthExceeded`,
        :class:`LLMRequestError` or :class:`LLMRetriesExhausted`.
        """
        ep = self.endpoint
        self.stats.calls += 1
        msgs = [dict(m) for m in messages]
        params: dict[str, Any] = {
            "temperature": ep.temperature if temperature is None else temperature,
            "top_p": ep.top_p if top_p is None else top_p,
            "max_tokens": ep.max_tokens if max_tokens is None else max_tokens,
            "seed": seed,
            "stop": [stop] if isinstance(stop, str) else (list(stop) if stop is not None else None),
        }
        params = {k: v for k, v in params.items() if v is not None}
        extra = dict(extra_body or {})
        clash = sorted(set(extra) & ({"model", "messages", "stream"} | set(params)))
        if clash:
            raise ValueError(f"extra_body may not set {', '.join(clash)}; use the named arguments")
        body: dict[str, Any] = {"model": ep.model, "messages": msgs, **params, **extra}

        request = {
            "endpoint": ep.name,
            "base_url": self._public_base_url,
            "model": ep.model,
            "messages": msgs,
            "params": {**params, **extra},
            "sample_id": sample_id,
        }
        key = cache_key(request) if self.cache is not None and use_cache else None
        if key is not None:
            hit = await self._from_cache(key)
            if hit is not None:
                return hit

        await self._ensure_key()
        est_prompt = estimate_prompt_tokens(msgs, self.count_tokens)
        cap = int(params.get("max_tokens") or 0)
        budget = self.budget
        reservation = None
        if budget is not None:
            reservation = budget.reserve(
                est_prompt + cap,
                ep.cost_usd(est_prompt, cap) or 0.0,
                what=f"a call to endpoint {ep.name!r} (~{est_prompt} prompt + {cap} max completion tokens)",
            )
        try:
            result = await self._send(body, est_prompt, cap)
        except BaseException:
            if budget is not None and reservation is not None:
                budget.release(reservation)
            self.stats.failures += 1
            raise
        if budget is not None and reservation is not None:
            budget.settle(reservation, result.total_tokens, result.cost_usd or 0.0)
        self.stats.prompt_tokens += result.prompt_tokens
        self.stats.completion_tokens += result.completion_tokens
        if key is not None:
            await self._to_cache(key, request, result)
        return result

    async def aclose(self) -> None:
        """Wait for this client's cache writes, close its connections (if it opened them)."""
        if self.cache is not None:
            await self.cache.flush()
        if self._owns_http and self._http is not None:
            await self._http.close()
            self._http = None

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    # -- cache ----------------------------------------------------------------------------------

    async def _from_cache(self, key: str) -> ChatResult | None:
        assert self.cache is not None
        t0 = time.monotonic()
        try:
            stored = await self.cache.aget(key)
        except Exception as e:  # a broken cache must not stop collection
            self._log(logging.WARNING, "LLM cache read failed for %s (%s: %s)", key, type(e).__name__, e)
            return None
        if stored is None:
            return None
        stored.update(cached=True, attempts=0, latency_s=time.monotonic() - t0)
        try:
            result = ChatResult.model_validate(stored)
        except ValidationError:
            self._log(logging.WARNING, "LLM cache entry %s does not hold a ChatResult; calling again", key)
            return None
        self.stats.cache_hits += 1
        return result

    async def _to_cache(self, key: str, request: Mapping[str, Any], result: ChatResult) -> None:
        assert self.cache is not None
        try:
            await self.cache.aput(key, request, result.model_dump(mode="json"), self._scrubber)
        except Exception as e:  # the reply is paid for; return it even if caching fails
            self._log(logging.WARNING, "LLM cache write failed for %s (%s: %s)", key, type(e).__name__, e)

    # -- transport ------------------------------------------------------------------------------

    async def _ensure_key(self) -> None:
        if self._key_ready:
            return
        async with self._key_lock:
            if not self._key_ready:
                self._api_key = await resolve_api_key(self.endpoint)
                self._scrubber.add(self._api_key)
                self._request_headers = self._headers()
                self._key_ready = True

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _session(self) -> aiohttp.ClientSession:
        """The HTTP session, created on first use in the running loop; one pooled connection per slot."""
        if self._http is None:
            ep = self.endpoint
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=ep.max_concurrency, limit_per_host=0),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=min(ep.connect_timeout_s, ep.timeout_s)
                ),
            )
        return self._http

    async def _post(self, body: dict[str, Any]) -> HTTPResponse:
        """One POST of ``body``; the whole exchange (connect, send, read the body) is the caller's to time."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        async with self._session().post(
            self._url,
            data=data,
            headers=self._request_headers,
            allow_redirects=False,
            proxy=self._proxy,
            proxy_auth=self._proxy_auth,
        ) as response:
            content = await response.read()
            return HTTPResponse(
                response.status,
                response.reason or "",
                {k.lower(): v for k, v in response.headers.items()},
                content,
            )

    async def _send(self, body: dict[str, Any], est_prompt: int, cap: int) -> ChatResult:
        ep = self.endpoint
        total = ep.max_retries + 1
        last = "no attempt made"
        for attempt in range(1, total + 1):
            try:
                return await self._attempt(body, est_prompt, cap, attempt)
            except Retryable as e:
                last = self._scrubber.text(e.reason)
                if attempt == total:
                    break
                delay = self._delay(attempt, e.retry_after)
                self.stats.retries += 1
                self._log(
                    logging.WARNING,
                    "LLM endpoint %r: attempt %d/%d failed: %s; retrying in %.2fs",
                    ep.name,
                    attempt,
                    total,
                    last,
                    delay,
                )
                await asyncio.sleep(delay)
        message = self._scrubber.text(
            f"LLM endpoint {ep.name!r} ({self._public_base_url}, model {ep.model}): all {total} attempt(s) "
            f"failed; last error: {last}"
        )
        self._log(logging.ERROR, "%s", message)
        raise LLMRetriesExhausted(message, attempts=total, endpoint=ep.name, last_error=last)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        ep = self.endpoint
        if retry_after is not None:
            wait = min(retry_after, ep.retry_after_max_s)
            return wait + self._random.uniform(0, 0.1 * wait)  # a little spread so waiters do not stampede
        return self._random.uniform(0, min(ep.backoff_max_s, ep.backoff_base_s * 2 ** (attempt - 1)))

    async def _attempt(self, body: dict[str, Any], est_prompt: int, cap: int, attempt: int) -> ChatResult:
        ep = self.endpoint
        est_total = est_prompt + cap
        async with self._semaphore:
            if self._rpm is not None:
                await self._rpm.acquire(1)
            if self._tpm is not None:
                await self._tpm.acquire(est_total)
            self.stats.requests += 1
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(ep.timeout_s):
                    response = await self._post(body)
            except TimeoutError:  # also aiohttp's connect and read timeouts
                raise Retryable(f"no reply within timeout_s={ep.timeout_s}s") from None
            except RETRYABLE_TRANSPORT as e:
                raise Retryable(f"connection error ({type(e).__name__}: {e})") from None
            except aiohttp.ClientError as e:
                raise LLMError(
                    self._scrubber.text(f"LLM endpoint {ep.name!r}: request failed ({type(e).__name__}: {e})")
                ) from None
            latency = time.monotonic() - t0
        result = self._parse(response, latency, attempt, est_prompt)
        if self._tpm is not None:
            self._tpm.adjust(result.total_tokens - est_total)
        return result

    def _parse(self, response: HTTPResponse, latency: float, attempt: int, est_prompt: int) -> ChatResult:
        ep = self.endpoint
        status = response.status_code
        if status in RETRY_STATUSES or status >= 500:
            raise Retryable(f"HTTP {status}: {error_detail(response)}", parse_retry_after(response.headers))
        if status >= 300:
            detail = self._scrubber.text(error_detail(response))
            where = f"LLM endpoint {ep.name!r} (model {ep.model})"
            if status in CONTEXT_LENGTH_STATUSES and is_context_length_error(response.text):
                raise ContextLengthExceeded(
                    f"{where}: prompt exceeds the model's context length (HTTP {status}): {detail}",
                    status=status,
                    endpoint=ep.name,
                )
            raise LLMRequestError(f"{where}: HTTP {status}: {detail}", status=status, endpoint=ep.name)
        try:
            data = response.json()
        except ValueError:
            raise Retryable(f"malformed JSON body: {response.text[:80]!r}") from None
        if not isinstance(data, dict):
            raise Retryable(f"malformed body: expected a JSON object, got {type(data).__name__}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            err = data.get("error")
            if err is not None and is_context_length_error(json.dumps(err)):
                raise ContextLengthExceeded(
                    self._scrubber.text(
                        f"LLM endpoint {ep.name!r}: prompt exceeds the context length: {err}"
                    ),
                    status=status,
                    endpoint=ep.name,
                )
            raise Retryable(f"malformed body: no choices ({json.dumps(data)[:SNIPPET]})")
        choice = choices[0]
        raw_message = choice.get("message")
        message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
        text = message_text(message.get("content"))
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        reasoning = str(reasoning) if reasoning else None
        finish = choice.get("finish_reason")
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        estimated = False
        if not isinstance(prompt_tokens, int) or isinstance(prompt_tokens, bool):
            prompt_tokens, estimated = est_prompt, True
        if not isinstance(completion_tokens, int) or isinstance(completion_tokens, bool):
            completion_tokens = self.count_tokens(text) + self.count_tokens(reasoning or "")
            estimated = True
        model = data.get("model")
        return ChatResult(
            text=self._scrubber.text(text),
            finish_reason=str(finish) if finish is not None else None,
            truncated=finish == "length",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            usage_estimated=estimated,
            latency_s=latency,
            cached=False,
            model=str(model) if isinstance(model, str) and model else ep.model,
            endpoint=ep.name,
            attempts=attempt,
            cost_usd=ep.cost_usd(prompt_tokens, completion_tokens),
            reasoning=self._scrubber.text(reasoning) if reasoning else None,
        )

    def _log(self, level: int, fmt: str, *args: Any) -> None:
        if log.isEnabledFor(level):
            log.log(level, "%s", self._scrubber.text(fmt % args))
