"""Benchmark: continuous batching (``hf_batched``) against micro-batched ``generate`` (``hf``) on CPU.

Requests with a long tail of lengths arrive over time, as an RL rollout's turns do: most generate
``short`` tokens, one in ``tail_every`` generates ``long``; a new request arrives every
``gap_ms``. Both policies run the same tiny random Qwen2 (greedy, the same ids on both sides;
tokens/s counts the ids actually generated), in one process, alternating ``--repeat`` times (the
host is shared: medians, side by side). Reported: wall time for all requests, tokens/s, the mean
and p90 latency of the short requests, and the ratios hf_batched / hf.

``hf`` gathers the waiting requests into one padded ``generate`` call (up to ``max_batch``) and a
request that arrives meanwhile waits for the whole call: a short one behind a long one waits for
the long one. ``hf_batched`` admits a request at the next decode step and lets it leave when done.

Run: ``PYTHONPATH=. python bench/bench_batching.py [--requests 48] [--repeat 3] [--quick] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from typing import Any

from harness import Bench, main

from coa.rollout import Sampling


async def drive(
    policy: Any, prompts: list[list[int]], budgets: list[int], gap_s: float
) -> tuple[float, list[float], int]:
    """All requests, one every ``gap_s``: wall time, each request's latency, tokens generated."""
    latencies = [0.0] * len(prompts)
    generated = [0] * len(prompts)

    async def one(i: int) -> None:
        start = time.perf_counter()
        generation = await policy.generate(prompts[i], budgets[i], Sampling())
        latencies[i] = time.perf_counter() - start
        generated[i] = len(generation.ids)
        assert generated[i] <= budgets[i]

    await policy.start()
    try:
        start = time.perf_counter()
        tasks = []
        for i in range(len(prompts)):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(gap_s)
        await asyncio.gather(*tasks)
        return time.perf_counter() - start, latencies, sum(generated)
    finally:
        await policy.stop()


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--short", type=int, default=16)
    parser.add_argument("--long", type=int, default=192)
    parser.add_argument("--tail-every", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--max-batch", type=int, default=16)


def run(args: argparse.Namespace, bench: Bench) -> None:
    import torch

    from coa.model.tiny import TinyModelConfig, init_model
    from coa.rollout.policies.hf import HFPolicy
    from coa.rollout.policies.hf_batched import HFBatchedPolicy

    if args.quick:  # a smoke size: 12 requests, one timed round
        args.requests, args.long, args.repeat = 12, 48, 1
    torch.set_num_threads(1)  # tiny model on a shared host: one intra-op thread is much faster
    shape = TinyModelConfig(
        vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128
    )
    with tempfile.TemporaryDirectory() as folder:
        texts = ["What is 6 * 7? Solve it with code and answer."] * 50
        model = str(init_model(texts, shape, f"{folder}/model"))
        policies = {
            "hf": HFPolicy(model, device="cpu", max_batch=args.max_batch),
            "hf_batched": HFBatchedPolicy(model, device="cpu", max_batch=args.max_batch),
        }
        codec = policies["hf"].codec
        prompts = [codec.encode(f"Question {i}: what is {i} * 7?") for i in range(args.requests)]
        budgets = [args.long if i % args.tail_every == 0 else args.short for i in range(args.requests)]
        short = [i for i, b in enumerate(budgets) if b == args.short]
        results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in policies}
        for policy in policies.values():  # warm up
            asyncio.run(drive(policy, prompts[:2], [4, 4], 0.0))
        for _ in range(args.repeat):
            for name, policy in policies.items():
                wall, latencies, tokens = asyncio.run(drive(policy, prompts, budgets, args.gap_ms / 1000))
                waits = sorted(latencies[i] for i in short)
                p90 = waits[int(0.9 * (len(waits) - 1))]
                results[name].append((wall, statistics.mean(waits), p90, tokens / wall))
    print(
        f"{args.requests} requests, one every {args.gap_ms:g} ms: {len(short)} of {args.short} tokens, "
        f"the rest {args.long}; greedy, max batch {args.max_batch}, 1 thread; medians of {args.repeat}"
    )
    print(f"{'policy':>11} {'wall s':>7} {'tokens/s':>9} {'short mean s':>12} {'short p90 s':>11}")
    medians = {}
    for name, rows in results.items():
        wall, mean, p90, rate = (statistics.median(r[k] for r in rows) for k in range(4))
        medians[name] = (wall, mean, p90)
        print(f"{name:>11} {wall:>7.2f} {rate:>9.0f} {mean:>12.3f} {p90:>11.3f}")
        bench.add_timing(f"{name} wall", [r[0] for r in rows])
        bench.figure(f"{name} tokens/s", rate)
        bench.figure(f"{name} short mean latency s", mean)
        bench.figure(f"{name} short p90 latency s", p90)
    (w0, m0, p0), (w1, m1, p1) = medians["hf"], medians["hf_batched"]
    print(f"hf_batched / hf: wall {w1 / w0:.2f}, short-request mean latency {m1 / m0:.2f}, p90 {p1 / p0:.2f}")
    bench.ratio("hf_batched / hf wall (medians)", w1, w0)
    bench.ratio("hf_batched / hf short mean latency", m1, m0)
    bench.ratio("hf_batched / hf short p90 latency", p1, p0)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
