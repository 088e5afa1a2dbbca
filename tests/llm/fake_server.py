"""A fake OpenAI-compatible ``/v1/chat/completions`` server for tests (FastAPI + uvicorn in a thread).

Replies are scripted: each request takes the next :class:`Reply` from the queue, or the default one
when the queue is empty (so a loop in the client can never hang the test on an unscripted request).
Every request is recorded (arrival time, headers, JSON body, the client's address: one per TCP
connection), as is the most requests ever in flight. uvicorn sets no concurrency limit, so it holds
hundreds of requests at once (the scale tests use 256).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
import time
from collections import deque
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from coa.llm.preflight import PROBE

DEFAULT_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
_USE_DEFAULT: Any = object()


def completion(
    content: str = "ok",
    *,
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = _USE_DEFAULT,
    model: str = "fake-model",
) -> dict[str, Any]:
    """A chat-completions response body."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
    }
    if usage is _USE_DEFAULT:
        body["usage"] = dict(DEFAULT_USAGE)
    elif usage is not None:
        body["usage"] = usage
    return body


@dataclasses.dataclass
class Reply:
    """One scripted reply. ``body`` None = a normal completion echoing the last message."""

    status: int = 200
    body: dict[str, Any] | None = None
    raw: str | None = None  # sent verbatim instead of JSON (malformed bodies)
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0
    batch: int = 0
    """Hold each request until ``batch`` requests of its batch (arrivals ``k*batch`` to
    ``(k+1)*batch - 1``) have arrived, at most 10 s: a client allowed ``batch`` at once then has
    exactly that many in flight, however loaded the machine, and one allowed fewer is seen."""


@dataclasses.dataclass
class Recorded:
    at: float
    headers: dict[str, str]
    body: dict[str, Any]
    peer: str = ""  # "host:port" of the client's connection


class FakeLLMServer:
    """Serve on 127.0.0.1:<free port>; ``url`` is the OpenAI-style base URL (``.../v1``)."""

    def __init__(self) -> None:
        self.app = FastAPI()
        self.app.add_api_route("/v1/chat/completions", self._handle, methods=["POST"])
        self._lock = threading.Lock()
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.probe = Reply()
        """The reply to a stage's endpoint check (:mod:`coa.llm.preflight`): answered apart, neither
        recorded nor taken from the script, so scripted runs see only their own calls."""
        self.probes = 0
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- control (test thread) ----------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self.script.clear()
            self.default = Reply()
            self.probe = Reply()
            self.probes = 0
            self.requests.clear()
            self.in_flight = 0
            self.max_in_flight = 0

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    @property
    def hits(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake LLM server did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    # -- serving (server thread) --------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        body = await request.json()
        if body.get("messages") == PROBE:
            with self._lock:
                self.probes += 1
                reply = self.probe
            return await self._reply(reply, body)
        with self._lock:
            peer = f"{request.client.host}:{request.client.port}" if request.client else ""
            self.requests.append(Recorded(time.monotonic(), dict(request.headers), body, peer))
            reply = self.script.popleft() if self.script else self.default
            arrival = len(self.requests) - 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if reply.batch:
                await self._hold(arrival // reply.batch * reply.batch + reply.batch)
            return await self._reply(reply, body)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _hold(self, arrivals: int) -> None:
        deadline = time.monotonic() + 10.0
        while len(self.requests) < arrivals and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    @staticmethod
    async def _reply(reply: Reply, body: dict[str, Any]) -> Response:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.raw is not None:
            content = reply.raw
        else:
            data = reply.body
            if data is None:
                last = body.get("messages", [{}])[-1].get("content", "")
                data = completion(f"echo: {last}")
            content = json.dumps(data)
        return Response(
            content=content,
            status_code=reply.status,
            media_type="application/json",
            headers=reply.headers,
        )
