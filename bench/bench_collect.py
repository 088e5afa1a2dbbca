"""Benchmark: collection throughput against a fake OpenAI-compatible endpoint with fixed latency.

A fake server (a separate process, so its CPU is not counted) answers every chat call after a
fixed latency L with a reply scripted by role, so the real multi-agent loop completes each task in
K model calls. Measured, in this process:

1. the LLM client alone: N calls at concurrency C; throughput as a ratio to the ideal C / L, and
   the client's CPU time per call (``time.process_time``);
2. collection: ``collect_runs`` over T tasks at concurrency C with the real runtime, endpoint
   backend and checkpoints; tasks/s as a ratio to the ideal C / (K * L), and CPU per model call.

Run: ``python bench/bench_collect.py [--latency-ms 50] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import tempfile
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request


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


def _serve(port: int, latency_s: float) -> None:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        await asyncio.sleep(latency_s)
        text = _reply(body["messages"])
        return {
            "id": "x",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def bench_client(
    url: str, calls: int, concurrency: int, cache_root: str | None
) -> tuple[float, float, int]:
    from coa.llm import EndpointConfig, LLMClient, ResponseCache

    endpoint = EndpointConfig(
        name="fake", base_url=url, model="fake", max_concurrency=concurrency, max_tokens=64
    )
    cache = ResponseCache(cache_root) if cache_root else None
    async with LLMClient(endpoint, cache=cache) as client:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await client.chat([{"role": "user", "content": f"q{i}"}], sample_id=i)

        await one(-1)  # warm the connection
        cpu, wall = time.process_time(), time.perf_counter()
        before = client.stats.retries
        await asyncio.gather(*(one(i) for i in range(calls)))
        return time.perf_counter() - wall, time.process_time() - cpu, client.stats.retries - before


async def bench_collect(url: str, tasks: int, concurrency: int, root: str) -> tuple[float, float, int]:
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
    endpoint = EndpointConfig(name="fake", base_url=url, model="fake", max_concurrency=64, max_tokens=64)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port, latency), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.post(
                f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}, timeout=5
            )
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    try:
        with tempfile.TemporaryDirectory() as root:
            os.environ["COA_STORAGE_ROOT"] = root
            print(f"fake endpoint latency L = {args.latency_ms:.0f} ms (server in its own process)")
            print("\n1) LLM client alone")
            head = f"{'concurrency':>11} {'calls':>6} {'calls/s':>9} {'ideal C/L':>10} {'ratio':>6}"
            print(f"{head} {'CPU ms/call':>12} {'retries':>8}")
            for c in (1, 4) if args.quick else (1, 4, 16, 64):
                n = max(20, min(400, int(c / latency * 2)))
                wall, cpu, retries = asyncio.run(bench_client(url, n, c, None))
                print(
                    f"{c:>11} {n:>6} {n / wall:>9.1f} {c / latency:>10.1f} {n / wall / (c / latency):>6.2f} "
                    f"{1000 * cpu / n:>12.2f} {retries:>8}"
                )
            n = 200
            cache_root = os.path.join(root, "cache")
            asyncio.run(bench_client(url, n, 16, cache_root))  # fill the cache
            wall, cpu, _ = asyncio.run(bench_client(url, n, 16, cache_root))
            print(f"{'16 cached':>11} {n:>6} {n / wall:>9.1f} {'-':>10} {'-':>6} {1000 * cpu / n:>12.2f}")
            print("\n2) collection (real multi-agent runtime, endpoint backend, checkpoints)")
            print(
                f"{'concurrency':>11} {'tasks':>6} {'K calls':>8} {'tasks/s':>8} {'ideal':>7} {'ratio':>6} "
                f"{'CPU ms/call':>12}"
            )
            for c in (1, 4) if args.quick else (1, 4, 16):
                tasks = max(4, min(160, int(c / latency)))
                wall, cpu, calls = asyncio.run(bench_collect(url, tasks, c, root))
                k = calls / tasks
                ideal = c / (k * latency)
                rate = tasks / wall
                print(
                    f"{c:>11} {tasks:>6} {k:>8.1f} {rate:>8.2f} {ideal:>7.2f} {rate / ideal:>6.2f} "
                    f"{1000 * cpu / calls:>12.2f}"
                )
    finally:
        server.terminate()
        server.join(timeout=10)


if __name__ == "__main__":
    main()
