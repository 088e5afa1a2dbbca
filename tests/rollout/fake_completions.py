"""A fake vLLM ``/v1/completions`` server speaking token ids: for tests (a thread) and the bench (a process).

A plain ASGI app under uvicorn on 127.0.0.1. It answers a prompt given as token ids with the ids
of a :class:`TurnScript` (picked by how many observations the prompt holds), after a fixed
latency; it honours ``max_tokens`` (finish ``length``) and ``stop_token_ids`` (finish ``stop``, the
id in ``stop_reason``), and returns ``token_ids``, ``prompt_token_ids`` and
``logprobs.token_logprobs`` (:func:`fake_logprob`, so a client can check the round trip). It has no
tokenizer: ``text`` is empty. Every request body is recorded, as is the most requests in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn


def fake_logprob(position: int, token: int) -> float:
    """The logprob the fake reports for ``token`` at ``position`` of a reply."""
    return -(((token * 7 + position) % 50) / 10 + 0.01)


@dataclasses.dataclass(frozen=True)
class TurnScript:
    """Reply ``turns[k]`` when the prompt holds ``k`` ids ``observation_id`` (the last reply after that)."""

    turns: Sequence[Sequence[int]]
    observation_id: int

    def __call__(self, prompt: Sequence[int]) -> list[int]:
        k = sum(1 for t in prompt if t == self.observation_id)
        return list(self.turns[min(k, len(self.turns) - 1)])


class FakeCompletionsApp:
    """The ASGI app: ``POST /v1/completions`` only."""

    def __init__(self, script: TurnScript, latency_s: float = 0.0) -> None:
        self.script = script
        self.latency_s = latency_s
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if scope["path"] != "/v1/completions" or scope["method"] != "POST":
            await _send(send, 404, {"error": "not found"})
            return
        body = json.loads(b"".join(chunks))
        self.requests.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            await _send(send, 200, self.complete(body))
        finally:
            self.in_flight -= 1

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise ValueError("this fake takes the prompt as a list of token ids")
        ids = self.script(prompt)
        stops = set(body.get("stop_token_ids") or ())
        finish, stop_reason = "stop", None
        cut = next((i for i, t in enumerate(ids) if t in stops), None)
        if cut is not None:
            ids, stop_reason = ids[: cut + 1], ids[cut]
        if len(ids) > body["max_tokens"]:
            ids, finish, stop_reason = ids[: body["max_tokens"]], "length", None
        choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": finish, "stop_reason": stop_reason}
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"token_logprobs": [fake_logprob(i, t) for i, t in enumerate(ids)]}
        if body.get("return_token_ids"):
            choice |= {"token_ids": ids, "prompt_token_ids": prompt}
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
        return {"id": "cmpl-fake", "object": "text_completion", "model": body["model"], "choices": [choice],
                "usage": usage | {"total_tokens": len(prompt) + len(ids)}}  # fmt: skip


async def _send(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def serve(app: FakeCompletionsApp, sock: socket.socket) -> uvicorn.Server:
    """A uvicorn server for ``app`` on ``sock`` (call ``.run(sockets=[sock])`` to serve)."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, backlog=2048)
    return uvicorn.Server(config)


class FakeCompletionsServer:
    """The app in a background thread; ``url`` is the OpenAI-style base URL (``.../v1``)."""

    def __init__(self, script: TurnScript, latency_s: float = 0.0) -> None:
        self.app = FakeCompletionsApp(script, latency_s)
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeCompletionsServer:
        sock = bind()
        self._server = serve(self.app, sock)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake completions server did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
