"""Benchmark: collection and curation on a 2-worker local Ray cluster ÷ the same in one process.

The workload is I/O-bound like a real teacher: the collect step on the endpoint backend against the
fixed-latency fake OpenAI-compatible endpoint of ``bench/bench_collect.py`` (its own process, every
call answered after exactly L seconds, K calls per task), with the real multi-agent runtime, real
tools (BM25 search over the synthetic encyclopedia) and checkpoints; then the curate step on the
runs it collected. Both sides run the very steps ``coa run`` runs, through :func:`coa.steps.run_step`:

* **one process**: ``execution.engine: local``, ``collect.concurrency = C`` (C runs in flight);
* **Ray**: ``execution.engine: ray`` on a local Ray cluster started here with 2 CPUs (2 workers),
  ``execution.shards = 2``, each shard ``C / 2`` in flight: the same C runs in flight in all, so
  the ratio is what the second process's CPU buys, not more concurrency.

The cluster, the Prefect server the shards report to and the two Ray workers (imports) are started
and warmed before the clock starts, as they would be on a running cluster; their cold start is
printed apart. Each side first runs a small untimed collection and curation (imports, caches), then
``--repeat`` times (default 2) into a fresh store, the fastest kept
(the machine is shared: other load only slows a run down). Ratios are one-process time ÷ Ray time
(> 1: Ray is faster). The ceiling printed beside them is what a bare raw-socket client reaches on the
same fake at the same concurrency (``bench_collect.bench_raw``): where it is far below 1, the fake
and the machine, not the collection, set the pace, and no fan-out can help.

Run: ``python bench/bench_ray.py [--tasks 1500] [--concurrency 64] [--latency-ms 50] [--repeat 2]
[--json F]`` (about 90 s on 2 cores; ``--quick``: 300 tasks, one run per side, about 40 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import Bench, main  # noqa: E402


def _tasks(store: Any, n: int) -> Any:
    """A committed task.v1 artifact of ``n`` multi-hop questions the fake's script answers."""
    import schemas
    from coa.steps import TableInput

    rows = [
        {
            "task_id": f"bench:{i}",
            "source": "bench",
            "family": "mhqa",
            "question": f"Who is X {i}?",
            "gold_answers": ["X"],
            "source_index": i,
            "metadata": "{}",
        }
        for i in range(n)
    ]
    writer = store.writer("tasks", "bench-ray", {"n": n})
    existing = writer.existing()
    if existing is None:
        with writer.table_writer("tasks", schemas.TASK) as write:
            write(schemas.TASK.from_rows(rows))
        pages = [{"doc_id": "person-0000", "title": "X", "text": "X is X."}]  # what web_search serves
        writer.write_table("encyclopedia", schemas.DOCUMENT.from_rows(pages), schemas.DOCUMENT)
        existing = writer.commit()
    return TableInput(existing, "tasks")


def _configs(url: str, concurrency: int) -> tuple[Any, Any]:
    from coa.collect.config import CollectConfig
    from coa.curate.config import CurateConfig
    from coa.llm import EndpointConfig, LLMConfig

    endpoint = EndpointConfig(
        name="fake", base_url=url, model="fake", max_concurrency=concurrency, max_tokens=64
    )
    collect = CollectConfig(
        backend="endpoint",
        concurrency=concurrency,
        llm=LLMConfig(endpoints=(endpoint,), cache=False),
        tools={"enabled": ("web_search",), "record": "off"},  # type: ignore[arg-type]
        teacher={"reflect_every": 2},  # type: ignore[arg-type]
    )
    return collect, CurateConfig()


def _side(root: str, url: str, tasks: int, concurrency: int, executor: Any) -> tuple[float, float, int, int]:
    """(collect s, curate s, runs, model calls) of one side into a fresh store at ``root``."""
    from coa import io
    from coa.collect import step as collect_step
    from coa.curate import step as curate_step
    from coa.steps import StepCheckFailed, TableInput, run_step

    store = io.Store(root)
    task_input = _tasks(store, tasks)
    collect_cfg, curate_cfg = _configs(url, concurrency)
    start = time.perf_counter()
    pages = TableInput(task_input.ref, "encyclopedia")
    collected = run_step(
        collect_step.step(collect_cfg, task_input, encyclopedia=pages), store, executor=executor
    )
    collect_s = time.perf_counter() - start
    raw = TableInput(collected.ref, "trajectories")
    start = time.perf_counter()
    # the gate's verdict on the fake's answers is not what is timed; the artifact is committed either way
    with contextlib.suppress(StepCheckFailed):
        run_step(curate_step.step(curate_cfg, raw, task_input), store, executor=executor)
    curate_s = time.perf_counter() - start
    # the fake bills 100 prompt tokens a call: the model calls of the runs, for the ideal rate
    calls = sum(io.read_table(collected.ref, "trajectories", columns=["prompt_tokens"]).column(0).to_pylist())
    return collect_s, curate_s, collected.ref.rows("trajectories"), calls // 100


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=None, help="tasks collected per side (default 1500)")
    parser.add_argument("--concurrency", type=int, default=64, help="runs in flight in all, per side")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the fake endpoint's fixed latency")


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--repeat``: runs per side, fastest kept (default 2; ``--quick``: 300 tasks, one run per side)."""
    tasks = args.tasks or (300 if args.quick else 1500)
    repeat = args.repeat or (1 if args.quick else 2)
    workdir = tempfile.mkdtemp(prefix="coa-bench-ray-")
    os.environ.setdefault("PREFECT_HOME", os.path.join(workdir, "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["RAY_DEDUP_LOGS"] = "1"

    import ray
    from bench_collect import _Fake, bench_raw

    from coa.execution import ExecutionConfig
    from tasks.fanout import RayExecutor, prefect_api_url

    fake = _Fake()
    url = fake.url(args.latency_ms / 1000)
    cold = time.perf_counter()
    prefect_api_url()  # the Prefect server the shards report to
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    executor = RayExecutor(ExecutionConfig(engine="ray", shards=2))
    try:
        executor.map(_warm, [0, 1], "warm")  # two workers up, the project imported in each
        cold_s = time.perf_counter() - cold
        half = max(1, args.concurrency // 2)
        for side, (c, ex) in enumerate([(args.concurrency, None), (half, executor)]):  # imports, caches
            _side(os.path.join(workdir, f"warm-{side}"), url, 2 * args.concurrency, c, ex)
        local = [
            _side(os.path.join(workdir, f"local-{r}"), url, tasks, args.concurrency, None)
            for r in range(repeat)
        ]
        on_ray = [_side(os.path.join(workdir, f"ray-{r}"), url, tasks, half, executor) for r in range(repeat)]
        # the ceiling: a raw-socket client making the same calls at the same concurrency on this fake
        calls = local[0][3]
        raw_s = min(asyncio.run(bench_raw(fake.port, calls, args.concurrency)) for _ in range(repeat))
    finally:
        executor.close()
        ray.shutdown()
        fake.stop()
    best = {
        "one process": (min(s[0] for s in local), min(s[1] for s in local), local[0][2]),
        "Ray, 2 workers": (min(s[0] for s in on_ray), min(s[1] for s in on_ray), on_ray[0][2]),
    }
    per_run = local[0][3] / local[0][2]
    ideal = args.concurrency / (per_run * args.latency_ms / 1000)
    print(
        f"fake endpoint: {args.latency_ms:.0f} ms fixed latency; {tasks} tasks; "
        f"{args.concurrency} runs in flight per side (Ray: 2 shards x {half}); best of {repeat};\n"
        f"Ray cold start (cluster, Prefect server, 2 workers) {cold_s:.1f} s, not timed"
    )
    ceiling = calls / raw_s / (args.concurrency / (args.latency_ms / 1000))
    print(
        f"{per_run:.1f} model calls a run: ideal collection rate C / (K * L) = {ideal:.1f} runs/s; ceiling "
        f"(a raw-socket client, same calls and concurrency, on this fake and machine) {ceiling:.2f} of ideal"
    )
    head = f"{'side':<16} {'runs':>6} {'collect s':>10} {'runs/s':>8} {'÷ ideal':>8}"
    print(f"{head} {'curate s':>9} {'total s':>8}")
    for name, (collect_s, curate_s, runs) in best.items():
        print(
            f"{name:<16} {runs:>6} {collect_s:>10.2f} {runs / collect_s:>8.1f} "
            f"{runs / collect_s / ideal:>8.2f} {curate_s:>9.2f} {collect_s + curate_s:>8.2f}"
        )
    one, two = best["one process"], best["Ray, 2 workers"]
    print(
        f"ratio (one process / Ray): collection {one[0] / two[0]:.2f}, curation {one[1] / two[1]:.2f}, "
        f"collection + curation {(one[0] + one[1]) / (two[0] + two[1]):.2f} (goal >= 1.6)"
    )
    for name, sides in (("one process", local), ("Ray, 2 workers", on_ray)):
        bench.add_timing(f"{name} collect", [s[0] for s in sides])
        bench.add_timing(f"{name} curate", [s[1] for s in sides])
    bench.ratio("one process / Ray, collection", one[0], two[0])
    bench.ratio("one process / Ray, curation", one[1], two[1])
    bench.ratio("one process / Ray, collection + curation", one[0] + one[1], two[0] + two[1])
    bench.figure("ceiling of ideal", ceiling)
    bench.figure("Ray cold start s", cold_s)


def _warm(_: int) -> int:
    import coa.collect.shards  # noqa: F401 - the imports a shard needs, paid before the clock
    import coa.curate.shards  # noqa: F401

    return os.getpid()


if __name__ == "__main__":
    main(run, __doc__, extra=arguments, repeat=None)
