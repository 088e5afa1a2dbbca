"""A fake vLLM ``/v1/completions`` server speaking token ids: for tests (a thread) and the bench (a process).

A minimal HTTP/1.1 keep-alive server on asyncio streams (127.0.0.1), cheap enough per request
that a benchmark measures the client, not the fake. It answers a prompt given as token ids with the
ids of a :class:`TurnScript` (picked by how many observations the prompt holds), after a fixed
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
from collections.abc import Sequence
from typing import Any


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


class FakeCompletions:
    """The protocol side: ``complete(body)`` builds a response body; ``handle`` serves one connection."""

    def __init__(self, script: TurnScript, latency_s: float = 0.0) -> None:
        self.script = script
        self.latency_s = latency_s
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

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

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
                length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
                raw = await reader.readexactly(length)
                status, payload = await self._answer(method, path, raw)
                data = json.dumps(payload).encode()
                reason = "OK" if status == 200 else "Error"
                status_line = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                writer.write(f"{status_line}content-length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        if method != "POST" or path != "/v1/completions":
            return 404, {"error": f"no route {method} {path}"}
        try:
            body = json.loads(raw)
        except ValueError as e:
            return 400, {"error": str(e)}
        self.requests.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            return 200, self.complete(body)
        except (KeyError, ValueError) as e:
            return 400, {"error": f"{type(e).__name__}: {e}"}
        finally:
            self.in_flight -= 1


def bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def serve(app: FakeCompletions, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve ``app`` on the bound ``sock`` until ``stop`` is set."""
    server = await asyncio.start_server(app.handle, sock=sock, backlog=4096)
    async with server:
        await stop.wait()


class FakeCompletionsServer:
    """The fake in a background thread (its own event loop); ``url`` is the base URL (``.../v1``)."""

    def __init__(self, script: TurnScript, latency_s: float = 0.0) -> None:
        self.app = FakeCompletions(script, latency_s)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeCompletionsServer:
        sock = bind()
        sock.listen()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(serve(self.app, sock, self._stop),), daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        self._loop.close()
