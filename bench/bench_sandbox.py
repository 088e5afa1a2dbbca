"""Benchmark: sandboxed code scoring (ms per run of 5 tests) and code-tool call latency, old vs new.

A "run" is one candidate program checked against its task's 5 tests (stdin/stdout tests for half
the runs, functional asserts for the other half; a quarter of the programs are wrong). All modes run
in this process, on the same runs, with the same limits, and must give identical verdicts:

* ``old``: the previous way, one fresh sandbox per test (``run_python`` per test, tests one after
  another), runs scored by ``--workers`` threads;
* ``per-run``: ``run_tests`` as callers use it today: one harness sandbox per run, each test a fresh
  process in it, runs scored by ``--workers`` threads;
* ``batch``: ``run_tests_batch(workers=--workers)``: each worker keeps one harness sandbox for
  many runs, each test still a fresh process with a fresh /tmp.

Then the code tool: ``cold`` (a sandbox started per call, as before) against ``pooled`` (a warm
sandbox from a ``SandboxPool``, discarded after the call), timed per call, after waiting for the
pool to be warm. Ratios are against the old path in the same process.

Last, the code tool under load, as collection calls it (``--threads`` callers at once, ``--load``
calls in all): ``one-use`` (``programs_per_sandbox=1``: each call's sandbox is discarded and a new
one started) against ``reused`` (the code tool's default, ``PROGRAMS_PER_SANDBOX``), by wall time
and by the machine's CPU time per call (``/proc/stat``, so the sandboxes' own CPU counts).

Run: ``python bench/bench_sandbox.py [--runs N] [--calls N] [--workers 2] [--load N] [--quick] [--json F]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness import Bench, main

from coa.tools.code import (
    TEST_CONFIG,
    AssertTest,
    CodeTest,
    IOTest,
    RunTestsReport,
    code_tool,
    run_tests,
    run_tests_batch,
)
from coa.tools.harness_pool import PROGRAMS_PER_SANDBOX, SandboxPool
from coa.tools.sandbox import SandboxConfig, run_python, sandbox_available

IO_PROGRAM = """\
import sys
data = sys.stdin.read().split()
n = int(data[0])
xs = list(map(int, data[1:1 + n]))
best = cur = xs[0]
for x in xs[1:]:
    cur = max(x, cur + x)
    best = max(best, cur)
print(best{bug})
"""
FUNC_PROGRAM = """\
def max_subarray(xs):
    best = cur = xs[0]
    for x in xs[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best{bug}
"""
TOOL_PAYLOAD = "```python\nimport math\nprint(sum(math.isqrt(i) for i in range(10000)))\n```"


def _kadane(xs: Sequence[int]) -> int:
    best = cur = xs[0]
    for x in xs[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best


def make_runs(count: int) -> list[tuple[str, list[CodeTest]]]:
    """``count`` runs of 5 tests; every 4th program is wrong (off by one)."""
    runs: list[tuple[str, list[CodeTest]]] = []
    for r in range(count):
        bug = " + 1" if r % 4 == 3 else ""
        arrays = [[((r + 7 * t + 3 * i) % 11) - 5 for i in range(8 + t)] for t in range(5)]
        if r % 2 == 0:
            tests: list[CodeTest] = [
                IOTest(f"{len(xs)}\n{' '.join(map(str, xs))}\n", str(_kadane(xs))) for xs in arrays
            ]
            runs.append((IO_PROGRAM.format(bug=bug), tests))
        else:
            tests = [AssertTest(f"assert max_subarray({xs!r}) == {_kadane(xs)}") for xs in arrays]
            runs.append((FUNC_PROGRAM.format(bug=bug), tests))
    return runs


def old_run_tests(code: str, tests: Sequence[CodeTest], config: SandboxConfig) -> list[bool]:
    """The previous scoring: one sandbox (``run_python``) per test, tests one after another."""
    verdicts = []
    for case in tests:
        if isinstance(case, IOTest):
            res = run_python(code, stdin=case.stdin, config=config)
            lines = [x.strip() for x in res.stdout.strip().splitlines()]
            want = [x.strip() for x in case.expected.strip().splitlines()]
            verdicts.append(res.ok and not res.stdout_truncated and lines == want)
        else:
            res = run_python(f"{code.rstrip()}\n\n{case.snippet}\n", config=config)
            verdicts.append(res.ok)
    return verdicts


def _verdicts(report: RunTestsReport) -> list[bool]:
    return [c.passed for c in report.cases]


def time_scoring(
    label: str, score: Callable[[], list[list[bool]]], runs: int, expected: list[list[bool]] | None
) -> tuple[float, list[list[bool]]]:
    start = time.perf_counter()
    verdicts = score()
    ms = (time.perf_counter() - start) * 1000 / runs
    if expected is not None and verdicts != expected:
        raise SystemExit(f"{label}: verdicts differ from the old path")
    print(f"  {label:<9} {ms:7.1f} ms per run of 5 tests")
    return ms, verdicts


def bench_scoring(runs: int, workers: int, config: SandboxConfig) -> dict[str, float]:
    jobs = make_runs(runs)
    print(f"scoring: {runs} runs x 5 tests, {workers} workers, {os.cpu_count()} CPUs")

    def old() -> list[list[bool]]:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda job: old_run_tests(job[0], job[1], config), jobs))

    def per_run() -> list[list[bool]]:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda job: _verdicts(run_tests(job[0], job[1], config)), jobs))

    def batch() -> list[list[bool]]:
        return [_verdicts(r) for r in run_tests_batch(jobs, config, workers=workers)]

    run_tests(*jobs[0], config)  # warm up (self-test, interpreter probe, page cache)
    results: dict[str, float] = {}
    results["old"], expected = time_scoring("old", old, runs, None)
    if sum(map(all, expected)) != runs - runs // 4:
        raise SystemExit("old path: unexpected verdicts (is the sandbox working?)")
    results["per-run"], _ = time_scoring("per-run", per_run, runs, expected)
    results["batch"], _ = time_scoring("batch", batch, runs, expected)
    for mode in ("per-run", "batch"):
        print(f"  {mode}: {results['old'] / results[mode]:.1f}x faster than old")
    return results


def bench_tool(calls: int, config: SandboxConfig) -> dict[str, float]:
    print(f"code tool: {calls} calls each, one at a time")
    expected = code_tool(TOOL_PAYLOAD, config)
    cold, pooled = [], []
    for _ in range(calls):
        start = time.perf_counter()
        if code_tool(TOOL_PAYLOAD, config) != expected:
            raise SystemExit("cold call: unexpected observation")
        cold.append(time.perf_counter() - start)
    with SandboxPool(config, size=2) as pool:
        for _ in range(calls):
            if not pool.wait_ready():
                raise SystemExit(f"pool did not warm up: {pool.last_error}")
            start = time.perf_counter()
            if code_tool(TOOL_PAYLOAD, pool=pool) != expected:
                raise SystemExit("pooled call: unexpected observation")
            pooled.append(time.perf_counter() - start)
        if pool.misses:
            raise SystemExit(f"{pool.misses} pooled calls found no warm sandbox")
    out: dict[str, Any] = {}
    for label, samples in (("cold", cold), ("pooled", pooled)):
        ms = [s * 1000 for s in samples]
        out[label] = statistics.mean(ms)
        print(f"  {label:<7} mean {statistics.mean(ms):6.1f} ms  median {statistics.median(ms):6.1f} ms")
    print(f"  pooled: {out['cold'] / out['pooled']:.1f}x lower latency than cold")
    return out


def _machine_cpu_s() -> float:
    """CPU seconds the whole machine spent busy so far (every process: the sandboxes too)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def bench_tool_load(calls: int, threads: int, config: SandboxConfig) -> dict[str, float]:
    print(f"code tool under load: {calls} calls from {threads} threads at once, a pool of 2")
    payloads = [TOOL_PAYLOAD.replace("10000", str(10000 + i)) for i in range(calls)]
    expected = [code_tool(p, config) for p in payloads[:3]]
    out: dict[str, float] = {}
    for label, per_sandbox in (("one-use", 1), ("reused", PROGRAMS_PER_SANDBOX)):
        with SandboxPool(config, size=2, programs_per_sandbox=per_sandbox) as pool:
            if not pool.wait_ready():
                raise SystemExit(f"pool did not warm up: {pool.last_error}")
            start, cpu = time.perf_counter(), _machine_cpu_s()
            with ThreadPoolExecutor(threads) as ex:
                seen = list(ex.map(lambda p: code_tool(p, pool=pool), payloads))
            wall, cpu = time.perf_counter() - start, _machine_cpu_s() - cpu
        if seen[:3] != expected:
            raise SystemExit(f"{label}: observations differ from a sandbox of their own")
        out[label], out[f"{label}_cpu"] = wall / calls * 1000, cpu / calls * 1000
        print(
            f"  {label:<8} {out[label]:6.1f} ms wall, {out[f'{label}_cpu']:6.1f} ms CPU per call "
            f"(sandboxes started in callers' threads: {pool.misses}, calls in a used one: {pool.reuses})"
        )
    print(
        f"  reused: {out['one-use'] / out['reused']:.1f}x the calls per second, "
        f"{out['one-use_cpu'] / out['reused_cpu']:.1f}x less CPU per call than one-use"
    )
    return out


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=200, help="code-scoring runs (5 tests each)")
    parser.add_argument("--calls", type=int, default=40, help="code-tool calls per mode")
    parser.add_argument("--workers", type=int, default=2, help="runs scored in parallel")
    parser.add_argument("--load", type=int, default=1000, help="code-tool calls under load, per mode")
    parser.add_argument("--threads", type=int, default=8, help="callers at once under load")


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--quick``: 60 runs, 15 calls, 300 under load (~1 minute)."""
    if args.quick:
        args.runs, args.calls, args.load = 60, 15, 300
    ok, message = sandbox_available()
    if not ok:
        print(f"no sandbox here: {message}", file=sys.stderr)
        raise SystemExit(1)
    print(message)
    scoring = bench_scoring(args.runs, args.workers, TEST_CONFIG)
    for mode, ms in scoring.items():
        bench.figure(f"scoring {mode} ms per run of 5 tests", ms)
    for mode in ("per-run", "batch"):
        bench.ratio(f"scoring {mode} / old, ms per run", scoring[mode], scoring["old"])
    tool = bench_tool(args.calls, SandboxConfig())
    bench.figure("code tool cold ms per call (mean)", tool["cold"])
    bench.figure("code tool pooled ms per call (mean)", tool["pooled"])
    bench.ratio("code tool pooled / cold latency", tool["pooled"], tool["cold"])
    load = bench_tool_load(args.load, args.threads, SandboxConfig())
    for key, value in load.items():
        bench.figure(f"under load {key} ms per call", value)
    bench.ratio("under load reused / one-use, wall per call", load["reused"], load["one-use"])
    bench.ratio("under load reused / one-use, CPU per call", load["reused_cpu"], load["one-use_cpu"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
