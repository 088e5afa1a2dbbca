"""What the demo's evaluation costs in memory: the peak while it generates, and what it leaves resident.

    python bench/bench_step_memory.py MODEL_FOLDER TASKS_ARTIFACT            # both parts
    python bench/bench_step_memory.py MODEL_FOLDER TASKS_ARTIFACT --peak 3   # the peak only, 3 runs each

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
import time
from pathlib import Path

import pyarrow.parquet as pq


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


def evaluation(model: str, tasks_uri: str, mode: str | None, rounds: int) -> None:
    from coa.evaluate.generation import open_policy
    from coa.evaluate.stage import evaluate_tasks
    from coa.plan import load_pipeline_config
    from coa.tools.build import build_toolbox

    ev = load_pipeline_config("configs/demo.yaml").evaluate
    assert ev is not None
    tasks = pq.read_table(Path(tasks_uri) / "heldout.parquet")
    toolbox = build_toolbox(load_pipeline_config("configs/demo.yaml").collect.tools, None)
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
            return
        print(
            f"[{round_}] evaluated {out.num_rows} rows in {time.time() - t:.0f}s: {rss():.0f} MiB", flush=True
        )
        close = getattr(policy, "close", None)
        if close:
            close()
        del policy, out
        gc.collect()
        print(f"[{round_}] after del+gc {rss():.0f} MiB", flush=True)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print(f"[{round_}] after malloc_trim {rss():.0f} MiB", flush=True)


def peaks(model: str, tasks_uri: str, runs: int) -> None:
    rows: dict[str, list[tuple[float, float, str]]] = {"shipped": [], "glibc-defaults": []}
    for _ in range(runs):
        for mode in rows:
            out = subprocess.run(
                [sys.executable, __file__, model, tasks_uri, "--child", mode],
                check=True,
                capture_output=True,
                text=True,
            )
            rise, seconds, correct = out.stdout.split()[-3:]
            rows[mode].append((float(rise), float(seconds), correct))
            print(f"{mode:15s} peak +{float(rise):,.0f} MiB over the policy, {seconds} s, {correct} right")
    shipped, default = (sorted(r[0] for r in rows[m])[runs // 2] for m in rows)
    print(f"median peak rise: shipped {shipped:,.0f} MiB, glibc defaults {default:,.0f} MiB "
          f"(x{default / shipped:.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("tasks")
    parser.add_argument(
        "--peak", type=int, default=0, help="runs of each mode for the peak (0: resident part)"
    )
    parser.add_argument("--child", choices=("shipped", "glibc-defaults"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        evaluation(args.model, args.tasks, args.child, 1)
    elif args.peak:
        peaks(args.model, args.tasks, args.peak)
    else:
        evaluation(args.model, args.tasks, None, 2)


if __name__ == "__main__":
    main()
