"""What the demo's evaluation costs in memory: the peak while it generates, and what it leaves resident.

    python bench/bench_step_memory.py MODEL_FOLDER TASKS_ARTIFACT            # both parts
    python bench/bench_step_memory.py MODEL_FOLDER TASKS_ARTIFACT --peak 3   # the peak only, 3 runs each
    python bench/bench_step_memory.py --quick   # both parts, short episodes, a tiny student and 2 tasks built

**Peak** (``--peak N``): the evaluation (``configs/demo.yaml``'s ``evaluate`` on the tasks artifact's
``heldout`` table) in a fresh process, N times as shipped and N times on glibc's defaults (no
``coa.resources.generation_heap``, the KV cache grown a position each decode step), interleaved:
the rise of the process's peak RSS (``ru_maxrss``) over the loaded policy, and the seconds. **Resident**
(without ``--peak``): the evaluation twice in one process, RSS after each run, after ``gc.collect``
and after glibc's ``malloc_trim`` (what the runner does after every build).
"""

import argparse
import contextlib
import ctypes
import gc
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from harness import Bench, main

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def rss() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def glibc_defaults(policy: object) -> None:
    """The policy as it was before 2026-11-27: a dynamic cache, glibc's own mmap threshold."""
    from coa.rollout.policies import hf

    hf.generation_heap = lambda: contextlib.nullcontext(False)  # type: ignore[assignment]
    model = policy.model  # type: ignore[attr-defined]
    generate = model.generate

    def dynamic(*args: object, **kwargs: object) -> object:
        kwargs.pop("cache_implementation", None)
        return generate(*args, **kwargs)

    model.generate = dynamic


def evaluation(
    model: str, tasks_uri: str, mode: str | None, rounds: int, quick: bool = False
) -> dict[str, Any]:
    """The evaluation ``rounds`` times in this process: RSS marks (MiB) and seconds per round."""
    from coa.evaluate.generation import open_policy
    from coa.evaluate.stage import evaluate_tasks
    from coa.plan import load_pipeline_config
    from coa.tools.build import build_toolbox

    ev = load_pipeline_config(DEMO).evaluate
    assert ev is not None
    if quick:  # the machinery only: short episodes
        ev = ev.model_copy(update={"max_turns": 2, "max_new_tokens": 16})
    tasks = pq.read_table(Path(tasks_uri) / "heldout.parquet")
    from coa.tools.collection import Collection

    pages = Collection.from_table(
        pq.read_table(Path(tasks_uri) / "encyclopedia.parquet")
    )  # the synthetic step's
    toolbox = build_toolbox(load_pipeline_config(DEMO).collect.tools, None, collection=pages)
    marks: dict[str, Any] = {"start_mib": rss(), "seconds": []}
    if mode is None:
        print(f"start {rss():.0f} MiB", flush=True)
    for round_ in range(rounds):
        policy = open_policy(ev, model)
        if mode == "glibc-defaults":
            glibc_defaults(policy)
        loaded = peak()
        t = time.time()
        out = evaluate_tasks(tasks, policy, toolbox, ev)
        if mode is not None:
            print(f"{peak() - loaded:.0f} {time.time() - t:.1f} {sum(out.column('correct').to_pylist())}")
            return marks
        marks["seconds"].append(time.time() - t)
        marks[f"{round_} evaluated_mib"] = rss()
        print(
            f"[{round_}] evaluated {out.num_rows} rows in {time.time() - t:.0f}s: {rss():.0f} MiB", flush=True
        )
        close = getattr(policy, "close", None)
        if close:
            close()
        del policy, out
        gc.collect()
        print(f"[{round_}] after del+gc {rss():.0f} MiB", flush=True)
        marks[f"{round_} after_gc_mib"] = rss()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print(f"[{round_}] after malloc_trim {rss():.0f} MiB", flush=True)
        marks[f"{round_} after_malloc_trim_mib"] = rss()
    return marks


def peaks(model: str, tasks_uri: str, runs: int, bench: Bench, quick: bool = False) -> None:
    rows: dict[str, list[tuple[float, float, str]]] = {"shipped": [], "glibc-defaults": []}
    for _ in range(runs):
        for mode in rows:
            out = subprocess.run(
                [sys.executable, __file__, "--model", model, "--tasks", tasks_uri, "--child", mode]
                + (["--quick"] if quick else []),
                check=False,
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(f"the {mode} child failed:\n{out.stderr[-3000:]}")
            rise, seconds, correct = out.stdout.split()[-3:]
            rows[mode].append((float(rise), float(seconds), correct))
            print(f"{mode:15s} peak +{float(rise):,.0f} MiB over the policy, {seconds} s, {correct} right")
    shipped, default = (sorted(r[0] for r in rows[m])[runs // 2] for m in rows)
    print(f"median peak rise: shipped {shipped:,.0f} MiB, glibc defaults {default:,.0f} MiB "
          f"(x{default / shipped:.1f})")  # fmt: skip
    for mode, runs_ in rows.items():
        bench.add_timing(f"{mode} evaluation", [r[1] for r in runs_])
        bench.figure(f"{mode} peak rise MiB", [r[0] for r in runs_])
    bench.ratio("shipped / glibc defaults median peak rise", shipped, default)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="student model folder (--quick: a tiny one built)")
    parser.add_argument("--tasks", help="tasks artifact folder with heldout.parquet (--quick: 4 tasks built)")
    parser.add_argument(
        "--peak", type=int, default=0, help="runs of each mode for the peak (0: resident part)"
    )
    parser.add_argument("--child", choices=("shipped", "glibc-defaults"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.model is None or args.tasks is None:
        if not args.quick:
            raise SystemExit("--model and --tasks are required (or --quick: both built on the spot)")
        from smoke import heldout_tasks, tiny_student

        with tempfile.TemporaryDirectory(prefix="coa-bench-memory-") as folder:
            args.model = args.model or str(tiny_student(Path(folder) / "model"))
            args.tasks = args.tasks or str(heldout_tasks(Path(folder) / "tasks", 2))
            measure(args, bench)
        return
    measure(args, bench)


def measure(args: argparse.Namespace, bench: Bench) -> None:
    if args.child:
        evaluation(args.model, args.tasks, args.child, 1, args.quick)
        return
    if args.peak or args.quick:
        peaks(args.model, args.tasks, args.peak or 1, bench, args.quick)
    if not args.peak:
        marks = evaluation(args.model, args.tasks, None, 2, args.quick)
        bench.add_timing("evaluation (resident part)", marks.pop("seconds"))
        for name, value in marks.items():
            bench.figure(f"rss {name}", round(value, 1))


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
