"""Benchmark: the LLM client and collection at 1 to 256 calls in flight against a fixed-latency fake.

The fake OpenAI-compatible endpoint is a bare asyncio HTTP/1.1 server in its own process (its CPU
is not counted): every ``POST /v1/chat/completions`` is answered after exactly L seconds, by a timer,
with a reply scripted by role so the real multi-agent loop completes each task in K model calls. It
costs ~0.05 ms of CPU a request, so it serves 256 connections at once; FastAPI + uvicorn (h11) cost
~1 ms, enough to be the bottleneck on a 2-core machine. Measured, in this process:

0. the fake alone: a minimal raw-socket client (persistent connections, no JSON) making the same
   number of calls at C in flight; its ratio to the ideal C / L is the ceiling that this machine
   (its other load included) and the fake allow, reported beside each row as ``ceiling``;
1. the LLM client alone: N calls at C in flight; throughput as a ratio to the ideal C / L, and
   the process CPU time per call (``time.process_time`` / calls);
2. collection: ``collect_runs`` over T tasks at concurrency C with the real runtime, endpoint
   backend and checkpoints; tasks/s as a ratio to the ideal C / (K * L), and CPU per model call.

The ideal is always C / L with L the fake's fixed latency. At high concurrency, L is raised so
that the ideal call rate stays at or under ``--max-rate`` (default 1280 calls/s, i.e. 64 in flight
at 50 ms): 256 in flight at 50 ms would ask for 5120 calls/s, which no Python client and server
sharing 2 cores can reach whatever the client does; the L of each row is printed.

Each row is run ``--repeat`` times (default 2) and the fastest run kept, the ceiling likewise: the
machine is shared and other load only ever slows a run down.

Fixed latency keeps the callers in lockstep: the C replies of a round arrive together and take
turns in one event loop, so a call's turn-around grows by about C x (CPU per call) / 2 (64 in
flight at ~0.3 ms a call: ~10 ms on 50). ``--jitter 0.2`` draws each latency from L * U(0.8, 1.2)
(same mean), as a real endpoint's latencies spread, and shows how much of a gap is that lockstep;
the goals are set with the fixed latency (the default).

Run: ``python bench/bench_collect.py [--latency-ms 50] [--max-rate 1280] [--levels 1,16,64,256]
[--repeat 2] [--quick] [--jitter 0.2] [--json F]`` (about 100 s; ``--quick``, one run per row and
fewer calls, about 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import socket
import tempfile
import time

from harness import Bench, main


def _reply(messages: list[dict[str, str]]) -> str:
    system, last = messages[0]["content"], messages[-1]["content"]
    seen = " ".join(m["content"] for m in messages[1:])
    if "write a plan" in system:
        return "Thought: one search is enough.\nPlan:\n1. Ask search_agent.\n2. Answer."
    if system.startswith("You are search_agent"):
        if "Observation:" in seen:
            done = "Action: final_answer\nAction Input: Answer: X (evidence: X)"
            return f"Review: found it.\nThought: done.\n{done}"
        return "Thought: search.\nAction: web_search\nAction Input: who is X"
    if "Grade three criteria" in system:
        return (
            "Thought: fine.\nInformation Conflict: good\nTool Effectiveness: good\n"
            "Trajectory Monitoring: good\nReflection: ok"
        )
    if "proposed answer" in system:
        return "Thought: check.\nSuggested Answer: X\nScore: 4\nAnalysis: supported"
    if last.startswith("Verification scored") or "Observation from" in seen:
        return "Thought: answer.\nAction: final_answer\nAction Input: X"
    return "Thought: ask.\nAction: search_agent\nAction Input: who is X"


def _completion(model: str, text: str) -> bytes:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
    ).encode()


class _FakeEndpoint(asyncio.Protocol):
    """One keep-alive connection of the fake: parse each request, answer it L seconds later (with
    ``jitter`` > 0: after a latency drawn uniformly from L * (1 +- jitter), mean L)."""

    def __init__(self, latency_s: float, jitter: float = 0.0, rng: random.Random | None = None) -> None:
        self.latency_s = latency_s
        self.jitter = jitter
        self.rng = rng or random.Random(0)
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        loop = asyncio.get_running_loop()
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            delay = self.latency_s
            if self.jitter:
                delay *= self.rng.uniform(1 - self.jitter, 1 + self.jitter)
            loop.call_later(delay, self._respond, lines[0], body)

    def _respond(self, request_line: str, body: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if not request_line.startswith("POST /v1/chat/completions "):
            out, status = b'{"error": {"message": "not found"}}', b"404 Not Found"
        else:
            data = json.loads(body) if body else {}
            messages = data.get("messages") or [{"role": "user", "content": ""}]
            out, status = _completion(str(data.get("model", "fake")), _reply(messages)), b"200 OK"
        head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(head % (status, len(out)) + out)


def _serve(port: int, latency_s: float, jitter: float) -> None:
    rng = random.Random(0)

    async def serve_forever() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _FakeEndpoint(latency_s, jitter, rng), "127.0.0.1", port, backlog=2048
        )
        await server.serve_forever()

    asyncio.run(serve_forever())


class _Fake:
    """The fake endpoint in a child process, restarted when the latency changes."""

    def __init__(self, jitter: float = 0.0) -> None:
        self.jitter = jitter
        self.latency_s = -1.0
        self.port = 0
        self.process: multiprocessing.process.BaseProcess | None = None

    def url(self, latency_s: float) -> str:
        if latency_s != self.latency_s:
            self.stop()
            self.port, self.latency_s = _free_port(), latency_s
            self.process = multiprocessing.get_context("spawn").Process(
                target=_serve, args=(self.port, latency_s, self.jitter), daemon=True
            )
            self.process.start()
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.join(timeout=10)
            self.process = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def bench_raw(port: int, calls: int, concurrency: int) -> float:
    """Seconds for ``calls`` requests over ``concurrency`` raw keep-alive connections (the ceiling)."""
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "q"}]}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    left = calls

    async def connection() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left > 0:
                left -= 1
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return time.perf_counter() - start


async def bench_client(
    url: str, calls: int, concurrency: int, cache_root: str | None
) -> tuple[float, float, int]:
    """(wall s, process CPU s, retries) for ``calls`` client calls at ``concurrency`` in flight."""
    from coa.llm import EndpointConfig, LLMClient, ResponseCache

    endpoint = EndpointConfig(
        name="fake", base_url=url, model="fake", max_concurrency=concurrency, max_tokens=64
    )
    cache = ResponseCache(cache_root) if cache_root else None
    async with LLMClient(endpoint, cache=cache) as client:
        # warm: one call per connection, so the timed part measures steady state, not connects
        await asyncio.gather(
            *(
                client.chat([{"role": "user", "content": "w"}], sample_id=-i, use_cache=False)
                for i in range(concurrency)
            )
        )
        before = client.stats.retries
        left = iter(range(calls))

        async def caller() -> None:  # one of C callers, each with one call in flight (as collection)
            for i in left:
                await client.chat([{"role": "user", "content": f"q{i}"}], sample_id=i)

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return time.perf_counter() - wall, time.process_time() - cpu, client.stats.retries - before


async def bench_collect(url: str, tasks: int, concurrency: int, root: str) -> tuple[float, float, int]:
    """(wall s, process CPU s, model calls) of collecting ``tasks`` tasks at ``concurrency``."""
    import schemas
    from coa.agents.llm_backend import EndpointBackend
    from coa.agents.runtime import MultiAgentTeacher, TeacherConfig
    from coa.collect import CheckpointFolder, collect_runs, plan_runs
    from coa.llm import EndpointConfig, LLMConfig, LLMRouter
    from coa.tools.toolbox import FunctionToolBox

    table = schemas.TASK.from_rows(
        [
            {
                "task_id": f"b:{i}",
                "source": "b",
                "family": "mhqa",
                "question": f"Who is X {i}?",
                "gold_answers": ["X"],
                "source_index": i,
                "metadata": "{}",
            }
            for i in range(tasks)
        ]
    )
    endpoint = EndpointConfig(
        name="fake", base_url=url, model="fake", max_concurrency=concurrency, max_tokens=64
    )
    tools = FunctionToolBox({"web_search": lambda q: "1. [X](local://doc/x)\nX is X."})
    async with LLMRouter(LLMConfig(endpoints=(endpoint,), cache=False)) as router:
        teacher = MultiAgentTeacher(EndpointBackend(router), tools, TeacherConfig(reflect_every=2))
        folder = CheckpointFolder(os.path.join(root, f"ckpt-{concurrency}"))
        cpu, wall = time.process_time(), time.perf_counter()
        outcome = await collect_runs(teacher, plan_runs(table, 1), folder, concurrency)
        elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
        calls = router.clients["fake"].stats.calls
    assert outcome.ran == tasks
    return elapsed, used, calls


def _latency(concurrency: int, base_s: float, max_rate: float) -> float:
    """The fake's latency for a row: the base, raised so that the ideal C / L is at most max_rate."""
    return max(base_s, concurrency / max_rate)


def _best(runs: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    """The run with the shortest wall time (the machine is shared: other load only slows a run)."""
    return min(runs, key=lambda r: r[0])


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency-ms", type=float, default=50.0, help="base latency of the fake")
    parser.add_argument("--max-rate", type=float, default=1280.0, help="highest ideal calls/s of a row")
    parser.add_argument("--levels", default="1,16,64,256", help="calls in flight, comma-separated")
    parser.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="latency spread: each reply after L * U(1 - j, 1 + j) (default 0: fixed, as the goal is set)",
    )


def run(args: argparse.Namespace, bench: Bench) -> None:
    """Runs per row: ``--repeat`` (default 2; ``--quick`` 1), the best kept."""
    base, quick = args.latency_ms / 1000, args.quick
    repeat = args.repeat or (1 if quick else 2)
    seconds = 1.0 if quick else 2.0  # timed ideal seconds per row
    levels = [int(x) for x in args.levels.split(",")]
    if not 0 <= args.jitter < 1:
        raise SystemExit("--jitter must be in [0, 1)")
    fake = _Fake(args.jitter)
    try:
        with tempfile.TemporaryDirectory() as root:
            os.environ["COA_STORAGE_ROOT"] = root
            spread = f" +-{100 * args.jitter:.0f}% (uniform)" if args.jitter else " (fixed)"
            print(
                f"fake endpoint: asyncio server in its own process, base latency {args.latency_ms:.0f} ms"
                f"{spread},"
            )
            print(
                f"L raised so the ideal C/L stays <= {args.max_rate:.0f} calls/s; ratio = achieved / ideal;"
            )
            print(f"best of {repeat} run(s) per row (ours and the ceiling alike)")
            print("\n1) LLM client alone (ceiling = raw-socket client on the same fake)")
            head = f"{'in flight':>9} {'L ms':>5} {'calls':>6} {'calls/s':>8} {'ideal':>7} {'ratio':>6}"
            print(f"{head} {'ceiling':>8} {'CPU ms/call':>12} {'retries':>8}")
            for c in levels:
                latency = _latency(c, base, args.max_rate)
                url = fake.url(latency)
                ideal = c / latency
                n = c * max(3, round(ideal * seconds / c))
                raw = min(asyncio.run(bench_raw(fake.port, n, c)) for _ in range(repeat))
                wall, cpu, retries = _best(
                    [asyncio.run(bench_client(url, n, c, None)) for _ in range(repeat)]
                )
                print(
                    f"{c:>9} {1000 * latency:>5.0f} {n:>6} {n / wall:>8.1f} {ideal:>7.1f} "
                    f"{n / wall / ideal:>6.2f} {n / raw / ideal:>8.2f} {1000 * cpu / n:>12.2f} {retries:>8}"
                )
                bench.add_timing(f"client {c} in flight", [wall])
                bench.ratio(f"client {c} in flight calls/s / ideal", n / wall, ideal)
                bench.figure(f"client {c} in flight ceiling", n / raw / ideal)
                bench.figure(f"client {c} in flight CPU ms per call", 1000 * cpu / n)
            c = 64
            latency = _latency(c, base, args.max_rate)
            url, ideal = fake.url(latency), c / latency
            n = c * max(3, round(ideal * seconds / c))
            runs: dict[str, list[tuple[float, float, int]]] = {"cache write": [], "cache hit": []}
            for r in range(repeat):  # the first pass fills a fresh cache, the second replays it
                cache_root = os.path.join(root, f"cache-{r}")
                for found in runs.values():
                    found.append(asyncio.run(bench_client(url, n, c, cache_root)))
            for label, found in runs.items():
                wall, cpu, _ = _best(found)
                ratio = f"{n / wall / ideal:>6.2f}" if label == "cache write" else f"{'-':>6}"
                print(
                    f"{f'{c} {label}':>9} {1000 * latency:>5.0f} {n:>6} {n / wall:>8.1f} {ideal:>7.1f} "
                    f"{ratio} {'-':>8} {1000 * cpu / n:>12.2f}"
                )
                bench.add_timing(f"client {c} in flight, {label}", [w for w, _, _ in found])
                bench.figure(f"client {c} in flight, {label}, CPU ms per call", 1000 * cpu / n)
            print("\n2) collection (real multi-agent runtime, endpoint backend, checkpoints)")
            head = f"{'in flight':>9} {'L ms':>5} {'tasks':>6} {'K calls':>8} {'tasks/s':>8} {'ideal':>7}"
            print(f"{head} {'ratio':>6} {'ceiling':>8} {'CPU ms/call':>12}")
            for c in levels:
                latency = _latency(c, base, args.max_rate)
                url = fake.url(latency)
                tasks = c * (2 if quick else 3) if c > 1 else (8 if quick else 16)
                wall, cpu, calls = _best(
                    [
                        asyncio.run(bench_collect(url, tasks, c, os.path.join(root, f"r{r}")))
                        for r in range(repeat)
                    ]
                )
                k = calls / tasks
                ideal = c / (k * latency)
                rate = tasks / wall
                raw = min(asyncio.run(bench_raw(fake.port, calls, c)) for _ in range(repeat))
                print(
                    f"{c:>9} {1000 * latency:>5.0f} {tasks:>6} {k:>8.1f} {rate:>8.2f} {ideal:>7.2f} "
                    f"{rate / ideal:>6.2f} {calls / raw / (c / latency):>8.2f} {1000 * cpu / calls:>12.2f}"
                )
                bench.add_timing(f"collection {c} in flight", [wall])
                bench.ratio(f"collection {c} in flight tasks/s / ideal", rate, ideal)
                bench.figure(f"collection {c} in flight ceiling", calls / raw / (c / latency))
                bench.figure(f"collection {c} in flight CPU ms per call", 1000 * cpu / calls)
    finally:
        fake.stop()


if __name__ == "__main__":
    main(run, __doc__, extra=arguments, repeat=None)
