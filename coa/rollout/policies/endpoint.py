"""An OpenAI-compatible ``/completions`` server (vLLM) as a policy: token ids in, token ids out.

Each request sends the prompt as a list of token ids and asks for the sampled ids and their
logprobs back (vLLM >= 0.10: ``return_token_ids`` gives ``token_ids`` per choice; ``logprobs: 1``
gives ``logprobs.token_logprobs``). Stops are sent as ``stop_token_ids`` when every stop tag is one
token of the tokenizer, else as ``stop`` strings with ``include_stop_str_in_output``; the returned
ids are cut like any generation (:meth:`Codec.cut`), and the text is never used.

Transport: one ``aiohttp.ClientSession`` per engine run, its connector holding
``max_connections`` connections (the engine's concurrency). aiohttp's pool is constant-time per
request and its HTTP parser is C; httpx's pool scans every connection on every request, which at
64 connections and more cost more client CPU than everything else (``bench/bench_rollout.py``).
With an engine client (:mod:`coa.engines`, the RL ``server`` backend) each request is stamped with
the weight version the engine holds when it is sent (the ledger's; an engine-reported version is
checked against it, a disagreement counted), names the engine's current model (the newest LoRA
adapter's name under a LoRA sync), and carries a seed of its own (data-parallel vLLM engines
share an RNG seed: unseeded requests repeat samples). A 400 saying the request exceeds the
engine's context is :class:`~coa.engines.ContextOverflow` naming ``max_model_len``.

The environment's proxy (``HTTP(S)_PROXY`` unless ``NO_PROXY`` matches the server) is read once
per run, its credentials sent as proxy authorisation. Bodies are encoded and decoded with orjson
(Prefect's own dependency): ~0.6 us for a request body and ~2 us for a response against ~35 and
~16 us with the standard library, a sixth of the client's CPU per generation at 64 in flight.
"""

from __future__ import annotations

import itertools
import os
import random
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import orjson

from coa.engines import ContextOverflow, EngineClient, is_context_overflow
from coa.errors import InfraError
from coa.llm.config import EndpointConfig
from coa.rollout.policy import STOP_TAGS, Codec, Generation, Sampling


def env_proxy(url: str) -> tuple[str | None, Any]:
    """The proxy the environment names for ``url`` without its user info, and that user info as
    ``aiohttp.BasicAuth`` (None, None when the server is reached directly)."""
    import aiohttp

    parts = urllib.parse.urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None, None
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy:
        return None, None
    p = urllib.parse.urlsplit(proxy)
    if not p.username:
        return proxy, None
    auth = aiohttp.BasicAuth(urllib.parse.unquote(p.username), urllib.parse.unquote(p.password or ""))
    host = p.hostname or ""
    netloc = f"{host}:{p.port}" if p.port else host
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment)), auth


class EndpointError(InfraError, RuntimeError):
    """The completions server is unreachable or lacks the API the policy needs (exit 3)."""


def no_token_api(url: str, seen: str) -> EndpointError:
    """The one-line error for a server without vLLM's token-id completions API, with the fix."""
    return EndpointError(
        f"completion endpoint {url} does not speak vLLM's token-id completions API ({seen}; the "
        "policy sends a prompt of token ids with return_token_ids, vLLM >= 0.10): serve the model "
        "with `vllm serve`, or generate in process with evaluate.backend=hf"
    )


class EndpointPolicy:
    """Token-level completions from a vLLM-style server."""

    def __init__(
        self,
        endpoint: EndpointConfig,
        codec: Codec,
        *,
        max_connections: int | None = None,
        engine: EngineClient | None = None,
        seed: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.engine = engine
        base = (
            random.Random(seed).getrandbits(31) if seed is not None else random.SystemRandom().getrandbits(31)
        )
        self._seeds = itertools.count(base)
        self.codec = codec
        self.name = endpoint.model
        self.url = f"{endpoint.resolved_base_url()}/completions"
        self.max_connections = max_connections or endpoint.max_concurrency
        self._session: Any = None
        self._proxy: str | None = None
        self._proxy_auth: Any = None

    async def start(self) -> None:
        import aiohttp

        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.endpoint.api_key_env) if self.endpoint.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._proxy, self._proxy_auth = env_proxy(self.url)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.endpoint.timeout_s),
        )

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None

    def body(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling, version: int | None = None
    ) -> dict[str, Any]:
        """The request body for one generation (sent under weight ``version``, when stamped)."""
        body: dict[str, Any] = {
            "model": self.engine.request_model(version) if self.engine is not None else self.endpoint.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "seed": next(self._seeds) % (2**31),
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if self.engine is not None and version is not None:  # no prefix KV shared across weight versions
            body["cache_salt"] = self.engine.cache_salt(version)
        if self.codec.single_token_stops:
            body["stop_token_ids"] = sorted(self.codec.stop_ids)
        else:
            body |= {"stop": list(STOP_TAGS), "include_stop_str_in_output": True}
        return body

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        if self._session is None:
            raise RuntimeError("EndpointPolicy.generate before start(): run it through the rollout engine")
        stamped = self.engine.ledger.stamp() if self.engine is not None else None
        try:
            data = orjson.dumps(self.body(prompt_ids, max_new_tokens, sampling, stamped))
            payload = await self._post(data, len(prompt_ids), max_new_tokens)
        finally:
            if self.engine is not None and stamped is not None:
                self.engine.ledger.release(stamped)
        choice = payload["choices"][0]
        version: int | None
        old_kv = False
        if self.engine is not None and stamped is not None:
            self.engine.ledger.check(stamped, self.engine.reported_version(payload))
            # the engine's report where it gives one (SGLang's spans), else the client's stamp: the
            # weights the engine held when it was sent, or a push's that had paused it (ledger.begin)
            version = self.engine.version_of(stamped, payload)
            # a push that keeps running requests' KV (vLLM keep, SGLang in_place) landed while it ran
            old_kv = self.engine.old_kv(stamped, payload)
        else:
            version = payload.get("weight_version")  # a server that reports an integer version
        ids = choice.get("token_ids")
        if ids is None:
            raise no_token_api(self.url, "its reply has no token_ids")
        logprobs = list((choice.get("logprobs") or {}).get("token_logprobs") or [])
        if len(logprobs) != len(ids):
            raise RuntimeError(
                f"completion endpoint {self.url}: {len(ids)} token ids but {len(logprobs)} logprobs"
            )
        generation = self.codec.cut(ids, logprobs, max_new_tokens)
        finish, stop = generation.finish, generation.stop
        if finish == "length" and choice.get("finish_reason") == "stop":
            matched = choice.get("stop_reason", choice.get("matched_stop"))  # vLLM's, SGLang's
            finish, stop = (
                ("stop", matched) if isinstance(matched, str) and matched in STOP_TAGS else ("eos", None)
            )
        return Generation(generation.ids, generation.logprobs, finish, stop, version, old_kv)

    async def _post(self, data: bytes, prompt_len: int, max_new_tokens: int) -> dict[str, Any]:
        import aiohttp

        try:
            async with self._session.post(
                self.url, data=data, proxy=self._proxy, proxy_auth=self._proxy_auth
            ) as response:
                status, raw = response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise EndpointError(f"completion endpoint {self.url} unreachable: {type(e).__name__}: {e}") from e
        text = raw[:300].decode("utf-8", "replace")
        if is_context_overflow(status, text):
            raise ContextOverflow(
                f"completion endpoint {self.url}: a prompt of {prompt_len} ids + max_tokens {max_new_tokens} "
                "exceeds the server's max_model_len: lower max_total_tokens / max_new_tokens or start the "
                "server with a larger --max-model-len"
            )
        if status in (400, 404, 422):
            raise no_token_api(self.url, f"HTTP {status}: {raw[:120].decode('utf-8', 'replace')!r}")
        if status != 200:
            raise EndpointError(f"completion endpoint {self.url} answered {status}: {text}")
        payload: dict[str, Any] = orjson.loads(raw)
        return payload
