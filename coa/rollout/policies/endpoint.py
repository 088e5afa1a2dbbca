"""An OpenAI-compatible ``/completions`` server (vLLM) as a policy: token ids in, token ids out.

Each request sends the prompt as a list of token ids and asks for the sampled ids and their
logprobs back (vLLM >= 0.10: ``return_token_ids`` gives ``token_ids`` per choice; ``logprobs: 1``
gives ``logprobs.token_logprobs``). Stops are sent as ``stop_token_ids`` when every stop tag is one
token of the tokenizer, else as ``stop`` strings with ``include_stop_str_in_output``; the returned
ids are cut like any generation (:meth:`Codec.cut`), and the text is never used.

Connections: ``max_connections`` in all (the engine's concurrency), opened per engine run, spread
over several ``httpx.AsyncClient`` of :data:`CONNECTIONS_PER_CLIENT` each; a request goes to the
client with the fewest requests in flight. One client with a large pool costs CPU in proportion to
its size on every request (httpcore scans all its connections), which at 64 connections and more
spends more time in the pool than in everything else.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from coa.llm.config import EndpointConfig
from coa.rollout.policy import STOP_TAGS, Codec, Generation, Sampling

CONNECTIONS_PER_CLIENT = 8


class EndpointPolicy:
    """Token-level completions from a vLLM-style server."""

    def __init__(
        self,
        endpoint: EndpointConfig,
        codec: Codec,
        *,
        max_connections: int | None = None,
        connections_per_client: int = CONNECTIONS_PER_CLIENT,
    ) -> None:
        self.endpoint = endpoint
        self.codec = codec
        self.name = endpoint.model
        self.url = f"{endpoint.resolved_base_url()}/completions"
        self.max_connections = max_connections or endpoint.max_concurrency
        self.connections_per_client = connections_per_client
        self._clients: list[Any] = []
        self._in_flight: list[int] = []
        self._tls: Any = None

    async def start(self) -> None:
        import httpx

        headers = {}
        key = os.environ.get(self.endpoint.api_key_env) if self.endpoint.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        per = self.connections_per_client
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        n = -(-self.max_connections // per)
        if self._tls is None:  # building one costs ~10 ms of CPU: once, shared by every client
            self._tls = httpx.create_ssl_context()
        self._clients = [
            httpx.AsyncClient(
                headers=headers, timeout=self.endpoint.timeout_s, limits=limits, verify=self._tls
            )
            for _ in range(n)
        ]
        self._in_flight = [0] * n

    async def stop(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients, self._in_flight = [], []

    def body(self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling) -> dict[str, Any]:
        """The request body for one generation."""
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if self.codec.single_token_stops:
            body["stop_token_ids"] = sorted(self.codec.stop_ids)
        else:
            body |= {"stop": list(STOP_TAGS), "include_stop_str_in_output": True}
        return body

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        import httpx

        if not self._clients:
            raise RuntimeError("EndpointPolicy.generate before start(): run it through the rollout engine")
        k = self._in_flight.index(min(self._in_flight))
        self._in_flight[k] += 1
        try:
            body = self.body(prompt_ids, max_new_tokens, sampling)
            response = await self._clients[k].post(self.url, json=body)
        except httpx.HTTPError as e:
            raise RuntimeError(f"completion endpoint {self.url} unreachable: {type(e).__name__}: {e}") from e
        finally:
            self._in_flight[k] -= 1
        if response.status_code != 200:
            raise RuntimeError(
                f"completion endpoint {self.url} answered {response.status_code}: {response.text[:300]}"
            )
        choice = response.json()["choices"][0]
        ids = choice.get("token_ids")
        if ids is None:
            raise RuntimeError(f"completion endpoint {self.url} returned no token_ids (needs vLLM >= 0.10)")
        logprobs = list((choice.get("logprobs") or {}).get("token_logprobs") or [])
        if len(logprobs) != len(ids):
            raise RuntimeError(
                f"completion endpoint {self.url}: {len(ids)} token ids but {len(logprobs)} logprobs"
            )
        generation = self.codec.cut(ids, logprobs, max_new_tokens)
        if generation.finish == "length" and choice.get("finish_reason") == "stop":
            matched = choice.get("stop_reason")  # a stop string the ids did not show, or EOS
            if isinstance(matched, str) and matched in STOP_TAGS:
                return Generation(generation.ids, generation.logprobs, "stop", matched)
            return Generation(generation.ids, generation.logprobs, "eos")
        return generation
