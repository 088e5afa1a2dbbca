"""Benchmark: the rollout engine against its ideal, and its two schedules against the loop it replaced.

1. **Endpoint.** The engine drives the fake vLLM completions server (its own process, so its CPU is
   not counted) with a fixed latency L; each episode is K = 2 generations and one instant tool
   call. Episodes/s as a ratio of the ideal C / (K * L) at C episodes in flight, and this
   process's CPU time per generation (the policy's transport is one aiohttp session).
2. **Overlap.** The engine under both schedules (``async``; ``lockstep`` waves, see
   :mod:`coa.rollout.engine`) and the old loop on the same scripted policy (generation latency
   varying per task) and the same tools with variable latency (mostly fast, a fifth slow):
   episodes/s over the old loop's.
3. **HF on CPU (the demo's evaluation).** The engine under both schedules (``async``: micro-batched
   ``generate``; ``lockstep``: waves decoded by :meth:`HFPolicy.generate_wave`) and the old loop
   (one ``generate`` call per chunk) on the same tiny student of the demo's shape, the demo's
   held-out tasks, the real tools, the demo's limits; wall time ratio, and how many episodes came
   out with the old loop's ids. Two students: random weights (what the evaluation
   before SFT sees: one turn to the token limit), and the same model made to write a two-turn
   script with a sandboxed code call (:class:`ForcedScript`, a stand-in for the trained student).
   ``CPU s`` is this process's CPU time: equal work on both sides; the wall ratio moves with
   whatever else the machine runs (best of two runs each).

The baseline, :func:`old_loop`, is the schedule of the earlier ``coa.evaluate.inference.run_loop``:
every round, all unfinished episodes (no concurrency bound) go through the policy in chunks of
``batch_size``; a chunk waits for its slowest generation, then runs its tools together and waits
for the slowest, then the next chunk starts. It applies the engine's own turn steps, so all give the
same episodes on a scripted policy. The engine's ``lockstep`` differs from it in keeping at most
``concurrency`` episodes live (the next spec joins as one ends), decoding a whole wave before any
of its tools run, and sorting a wave by length before cutting it into batches.

Run: ``PYTHONPATH=. python bench/bench_rollout.py [--latency-ms 50] [--quick] [--in-flight 16,64,256]
[--repeat 3] [--parts endpoint,overlap,hf] [--json F]``. ``CPU ms/req`` is the bare client's CPU per request,
beside the engine's ``CPU ms/gen``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from harness import Bench, main

from coa.rollout import Codec, Episode, EpisodeSpec, Generation, RolloutConfig, run_episodes
from coa.rollout.engine import advance, call_tool, close, next_budget
from coa.rollout.policies.endpoint import EndpointPolicy
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.tools.toolbox import ToolResult
from tests.rollout.fake_completions import FakeCompletions, TurnScript, bind, serve

CHATML = "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
CODE_TURN = (
    "<plan>\nCompute it with code.\n</plan>\n<think>\nRun it.\n</think>\n"
    "<code>\n```python\nprint(6 * 7)\n```\n</code>"
)
ANSWER = (
    "<reflection>\nIt printed 42.\n</reflection>\n<think>\nAnswer.\n</think>\n"
    "<answer>\n\\boxed{42}\n</answer>"
)

ASYNC, WAVES = {"schedule": "async"}, {"schedule": "lockstep"}
GenerateChunk = Callable[[Sequence[Sequence[int]], Sequence[int]], Awaitable[list[Generation]]]


async def old_loop(
    specs: Sequence[EpisodeSpec],
    generate_chunk: GenerateChunk,
    codec: Codec,
    toolbox: Any,
    config: RolloutConfig,
    batch_size: int,
) -> list[Episode]:
    """The earlier evaluation loop's schedule (see the module docstring), on token ids."""
    episodes = [
        Episode(s.task_id, s.sample_index, list(s.prompt_ids), started_at=time.perf_counter()) for s in specs
    ]
    for _ in range(config.max_turns):
        budgets = {id(e): next_budget(e, config) for e in episodes if e.finish is None}
        active = [e for e in episodes if e.finish is None and budgets[id(e)] is not None]
        if not active:
            break
        for start in range(0, len(active), batch_size):
            chunk = active[start : start + batch_size]
            prompts = [e.prompt_ids + e.completion_ids for e in chunk]
            generations = await generate_chunk(prompts, [budgets[id(e)] or 0 for e in chunk])
            calls = [advance(e, g, codec, config) for e, g in zip(chunk, generations, strict=True)]
            await asyncio.gather(
                *(
                    call_tool(e, toolbox, codec, *c)
                    for e, c in zip(chunk, calls, strict=True)
                    if c is not None
                )
            )
    return [close(e, codec, config) for e in episodes]


class DelayedTools:
    """Answers ``42`` after ``fast`` seconds, or ``slow`` one time in five (drawn per argument, seeded)."""

    def __init__(self, fast: float = 0.0, slow: float = 0.0, seed: int = 0) -> None:
        self.fast, self.slow, self.seed = fast, slow, seed

    @property
    def tools(self) -> tuple[str, ...]:
        return ("code",)

    async def call(self, name: str, argument: str) -> ToolResult:
        slow = random.Random(f"{self.seed}:{argument}").random() < 0.2
        delay = self.slow if slow else self.fast
        if delay > 0:
            await asyncio.sleep(delay)
        return ToolResult("42")


def bench_codec() -> Codec:
    from coa.model.tiny import TinyModelConfig, train_tokenizer

    texts = [CODE_TURN, ANSWER, "What is 6 * 7? Solve it with code and answer."] * 50
    return Codec(train_tokenizer(texts, TinyModelConfig(vocab_size=512)))


def specs_for(codec: Codec, n: int, tag: str = "Q") -> list[EpisodeSpec]:
    return [
        EpisodeSpec(f"{tag}{i}", codec.encode(CHATML.format("Solve it.", f"{tag}{i} What is 6 * 7?")))
        for i in range(n)
    ]


def _serve(script: TurnScript, latency_s: float, conn: Any) -> None:
    sock = bind()
    sock.listen()
    conn.send(sock.getsockname()[1])

    async def forever() -> None:
        await serve(FakeCompletions(script, latency_s), sock, asyncio.Event())

    asyncio.run(forever())


def bench_endpoint(
    latencies_s: Sequence[float],
    quick: bool,
    in_flight: Sequence[int] | None = None,
    repeat: int = 1,
    bench: Bench | None = None,
) -> None:
    """Episodes/s of the engine and of the bare client at each concurrency; with ``repeat`` > 1 the two
    alternate and each column is the median of the repeats (the machine is shared: a ratio of medians
    measured side by side, never a number from another run)."""
    import statistics

    from coa.llm.config import EndpointConfig

    codec = bench_codec()
    observation = codec.tokenizer.convert_tokens_to_ids("</observation>")
    script = TurnScript([codec.encode(CODE_TURN), codec.encode(ANSWER)], observation)
    print("\n1) endpoint: fake vLLM completions server (own process), latency L, K = 2 generations, 1 tool")
    head = f"{'L ms':>5} {'in flight':>9} {'episodes':>8} {'eps/s':>8} {'ideal':>8} {'ratio':>6}"
    tail = f"{'CPU ms/gen':>11} {'ceiling eps/s':>13} {'of ideal':>8} {'CPU ms/req':>10} {'of ceiling':>10}"
    print(f"{head} {tail}")
    for latency_s in latencies_s:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        server = ctx.Process(target=_serve, args=(script, latency_s, child), daemon=True)
        server.start()
        url = f"http://127.0.0.1:{parent.recv()}/v1"
        endpoint = EndpointConfig(name="fake", base_url=url, model="fake", max_retries=0)
        try:
            _wait_for(url)
            for c in in_flight or ([16, 64] if quick else [64, 256]):
                n = c * (3 if quick else 6 if latency_s < 0.2 else 2)
                config = RolloutConfig(max_turns=4, max_new_tokens=256, max_total_tokens=1024, concurrency=c)
                policy = EndpointPolicy(endpoint, codec, max_connections=c)
                body = policy.body(specs_for(codec, 1)[0].prompt_ids, 256, RolloutConfig().sampling())
                asyncio.run(run_episodes(specs_for(codec, c, "warm"), policy, DelayedTools(), config))
                rates, cpus, ceilings, ceiling_cpus = [], [], [], []
                specs = specs_for(codec, n)  # the prompts are the caller's work, not the engine's
                for _ in range(repeat):
                    cpu, wall = time.process_time(), time.perf_counter()
                    episodes = asyncio.run(run_episodes(specs, policy, DelayedTools(), config))
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    assert all(e.finish == "answer" and e.turns == 2 for e in episodes)
                    rates.append(n / wall)
                    cpus.append(1000 * cpu / (2 * n))
                    cpu = time.process_time()
                    ceilings.append(asyncio.run(_ceiling(url, body, c, 2 * n)) / 2)  # two requests an episode
                    ceiling_cpus.append(1000 * (time.process_time() - cpu) / (2 * n + c))
                rate, ceiling = statistics.median(rates), statistics.median(ceilings)
                ideal = c / (2 * latency_s)
                print(
                    f"{latency_s * 1000:>5.0f} {c:>9} {n:>8} {rate:>8.1f} {ideal:>8.1f} "
                    f"{rate / ideal:>6.2f} {statistics.median(cpus):>11.2f} {ceiling:>13.1f} "
                    f"{ceiling / ideal:>8.2f} {statistics.median(ceiling_cpus):>10.2f} "
                    f"{rate / ceiling:>10.2f}",
                    flush=True,
                )
                if bench is not None:
                    row = f"endpoint L {latency_s * 1000:.0f} ms, {c} in flight"
                    bench.ratio(f"{row}: episodes/s / ideal", rate, ideal)
                    bench.ratio(f"{row}: episodes/s / bare client's", rate, ceiling)
                    bench.figure(f"{row}: CPU ms per generation", statistics.median(cpus))
        finally:
            server.terminate()
            server.join(timeout=10)


async def _ceiling(url: str, body: dict[str, Any], in_flight: int, n: int) -> float:
    """Requests/s of a bare aiohttp loop (no engine, no tokenizer) on the fake at ``in_flight``: what
    this machine's fake and network stack allow, the ceiling beside the ideal on a loaded host."""
    import json

    import aiohttp

    data = json.dumps(body).encode()
    gate = asyncio.Semaphore(in_flight)
    connector = aiohttp.TCPConnector(limit=in_flight, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with gate, session.post(f"{url}/completions", data=data) as response:
                await response.read()

        await asyncio.gather(*(one() for _ in range(in_flight)))  # warm the connections
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - start)


def _wait_for(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.post(f"{url}/completions", json={"model": "x", "prompt": [1], "max_tokens": 1}, timeout=5)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def bench_overlap(latency_s: float, quick: bool, bench: Bench | None = None) -> None:
    codec = bench_codec()
    n, c = (64, 32) if quick else (256, 64)
    rng = random.Random(0)
    specs = specs_for(codec, n)
    latency = {s.task_id + " ": rng.uniform(0.4, 1.6) * latency_s for s in specs}
    replies = {  # each task's programs name it, so each tool call draws its own latency
        s.task_id + " ": [CODE_TURN.replace("6 * 7", f"6 * 7  # {s.task_id} {k}") for k in (1, 2)] + [ANSWER]
        for s in specs
    }
    tools = DelayedTools(fast=0.2 * latency_s, slow=6 * latency_s)
    config = RolloutConfig(max_turns=4, max_new_tokens=256, max_total_tokens=1024, concurrency=c)
    ms = 1000 * latency_s
    print(
        f"\n2) overlap: scripted policy (L {0.4 * ms:.0f}-{1.6 * ms:.0f} ms a task), tools {0.2 * ms:.0f} ms"
    )
    print(f"   or 1 in 5 {6 * ms:.0f} ms; 3 generations and 2 tool calls per episode")
    print(f"{'loop':>9} {'episodes':>8} {'in flight':>9} {'wall s':>7} {'eps/s':>8} {'ratio':>6}")
    policy = ScriptedPolicy(codec, replies, latency_s=latency)

    async def gather_chunk(prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[Generation]:
        return list(
            await asyncio.gather(
                *(policy.generate(p, b, config.sampling()) for p, b in zip(prompts, budgets, strict=True))
            )
        )

    wall = time.perf_counter()
    old = asyncio.run(old_loop(specs, gather_chunk, codec, tools, config, c))
    old_wall = time.perf_counter() - wall
    print(f"{'old loop':>9} {n:>8} {c:>9} {old_wall:>7.2f} {n / old_wall:>8.1f} {1.0:>6.2f}")
    for schedule in ("async", "lockstep"):
        wall = time.perf_counter()
        new = asyncio.run(
            run_episodes(specs, policy, tools, config.model_copy(update={"schedule": schedule}))
        )
        new_wall = time.perf_counter() - wall
        assert [e.completion_ids for e in old] == [e.completion_ids for e in new]
        assert all(e.finish == "answer" for e in new)
        print(
            f"{schedule:>9} {n:>8} {c:>9} {new_wall:>7.2f} {n / new_wall:>8.1f} {old_wall / new_wall:>6.2f}"
        )
        if bench is not None:
            bench.add_timing(f"overlap {schedule}", [new_wall])
            bench.ratio(f"overlap {schedule} / old loop, episodes/s", old_wall, new_wall)
    if bench is not None:
        bench.add_timing("overlap old loop", [old_wall])


class ForcedScript:
    """A logits processor that makes any model write a fixed two-turn CoA script per task.

    A stand-in for the demo's trained student (no trained weights here): turn 1 plans and calls the
    code tool, turn 2 reflects and answers; generation, stops, tools and batching run for real,
    only the argmax is dictated. The turn is read from the ids (observations so far), the task from
    the prompt ids before the assistant header.
    """

    def __init__(self, codec: Codec, scripts: dict[tuple[int, ...], list[list[int]]]) -> None:
        self.scripts = scripts
        self.eos, self.pad = codec.eos_id, codec.pad_id
        self.observation = codec.tokenizer.convert_tokens_to_ids("</observation>")
        self.header = codec.encode("<|im_start|>assistant\n")

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        forced = scores.new_full(scores.shape, float("-inf"))
        for row, seq in enumerate(input_ids.tolist()):
            start = len(seq) - seq[::-1].index(self.header[0]) - 1 + len(self.header)
            turns = self.scripts[tuple(t for t in seq[:start] if t != self.pad)]
            done = seq[start:]
            seen = done.count(self.observation)
            begin = start + len(done) - done[::-1].index(self.observation) + 1 if seen else start
            script = turns[min(seen, len(turns) - 1)]
            k = len(seq) - begin
            forced[row, script[k] if k < len(script) else self.eos] = 0.0
        return forced


def bench_hf(quick: bool, bench: Bench | None = None) -> None:
    import functools

    import torch
    from transformers import LogitsProcessorList

    from coa.format import system_prompt
    from coa.format.from_run import variant_of
    from coa.model.tiny import TinyModelConfig, init_model
    from coa.rollout.policies.hf import HFPolicy
    from coa.synthetic import SyntheticConfig, generate_all
    from coa.tools.build import build_toolbox
    from coa.tools.config import ToolsConfig

    torch.set_num_threads(1)
    heldout = {"arithmetic": 100, "multihop": 50, "programming": 50}
    if quick:
        heldout = {k: v // 5 for k, v in heldout.items()}
    synthetic = SyntheticConfig(train={}, heldout=heldout, arithmetic_templates=("chain",))  # type: ignore[arg-type]
    rows = generate_all(synthetic)["heldout"].to_pylist()
    shape = TinyModelConfig(
        vocab_size=2048, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=384
    )
    from coa.synthetic import encyclopedia_table
    from coa.tools.collection import Collection

    pages = Collection.from_table(
        encyclopedia_table(synthetic.encyclopedia_seed, synthetic.encyclopedia_size)
    )
    toolbox = build_toolbox(ToolsConfig(enabled=("code", "web_search"), record="off"), None, collection=pages)
    config = RolloutConfig(max_turns=6, max_new_tokens=256, max_total_tokens=768, concurrency=128)
    print(
        f"\n3) HF generate on CPU: tiny student of the demo's shape ({shape.num_layers} layers, vocab 2048)"
    )
    print(f"   {len(rows)} demo held-out tasks, real tools (sandboxed code), batch 32")
    head = f"{'student':>9} {'loop':>9} {'wall s':>7} {'CPU s':>6} {'generates':>9} {'turns':>6} {'tools':>6}"
    print(f"{head} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        texts = [r["question"] for r in rows] + [CODE_TURN, ANSWER] * 20
        model = init_model(texts, shape, f"{folder}/model")
        policy = HFPolicy(str(model), device="cpu", max_batch=32)
        codec = policy.codec
        specs, scripts = [], {}
        for row in rows:
            system, _ = system_prompt(variant_of(row["family"], {}), "brief")
            spec = EpisodeSpec(row["task_id"], codec.chat_prompt_ids(system, row["question"]))
            specs.append(spec)
            program = CODE_TURN.replace("6 * 7", f"len({row['task_id']!r})")
            scripts[tuple(spec.prompt_ids)] = [codec.encode(program), codec.encode(ANSWER)]

        async def batch_chunk(prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[Generation]:
            return await asyncio.to_thread(policy.generate_batch, prompts, budgets, config.sampling())

        policy.generate_batch([specs[0].prompt_ids], [8], config.sampling())  # warm up before timing
        generate = policy.model.generate
        for student in ("random", "scripted"):
            if student == "scripted":
                forced = LogitsProcessorList([ForcedScript(codec, scripts)])
                policy.model.generate = functools.partial(generate, logits_processor=forced)
            runs = {
                "old loop": lambda: old_loop(specs, batch_chunk, codec, toolbox, config, 32),
                "async": lambda: run_episodes(specs, policy, toolbox, config.model_copy(update=ASYNC)),
                "lockstep": lambda: run_episodes(specs, policy, toolbox, config.model_copy(update=WAVES)),
            }
            best: dict[str, tuple[float, float, int, list[Episode]]] = {}
            for _ in range(1 if quick else 2):  # alternate, keep each one's best (the machine is shared)
                for name, run in runs.items():
                    calls, cpu, wall = policy.calls, time.process_time(), time.perf_counter()
                    episodes = asyncio.run(run())
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    if name not in best or wall < best[name][0]:
                        best[name] = (wall, cpu, policy.calls - calls, episodes)
            old_wall, old = best["old loop"][0], best["old loop"][3]
            for name, (wall, cpu, calls, eps) in best.items():
                turns, tools = sum(e.turns for e in eps), sum(len(e.tool_calls) for e in eps)
                counts = f"{cpu:>6.2f} {calls:>9} {turns:>6} {tools:>6}"
                print(f"{student:>9} {name:>9} {wall:>7.2f} {counts} {old_wall / wall:>6.2f}")
                if bench is not None:
                    bench.add_timing(f"hf {student} {name}", [wall])
                    if name != "old loop":
                        bench.ratio(f"hf {student} {name} / old loop, wall", wall, old_wall)
            for name in ("async", "lockstep"):
                same = sum(
                    a.completion_ids == b.completion_ids for a, b in zip(old, best[name][3], strict=True)
                )
                print(f"{'':>9} {name}: the old loop's ids in {same}/{len(rows)} episodes")
                if bench is not None:
                    bench.figure(f"hf {student} {name}: episodes with the old loop's ids", [same, len(rows)])


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument(
        "--in-flight",
        default=None,
        help="episodes in flight for part 1, e.g. 16,64,256 (default 64,256; quick 16,64)",
    )
    parser.add_argument("--parts", default="endpoint,overlap,hf", help="which parts to run (comma-separated)")


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--repeat`` (default 1): part 1's engine and bare client alternate; medians."""
    latency = args.latency_ms / 1000
    parts = set(args.parts.split(","))
    in_flight = [int(c) for c in args.in_flight.split(",")] if args.in_flight else None
    if "endpoint" in parts:
        latencies = [latency] if args.quick or in_flight else [latency, 10 * latency]
        bench_endpoint(latencies, args.quick, in_flight, max(1, args.repeat or 1), bench)
    if "overlap" in parts:
        bench_overlap(latency, args.quick, bench)
    if "hf" in parts:
        bench_hf(args.quick, bench)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments, repeat=None)
