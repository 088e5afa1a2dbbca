"""The quick set: every bench that needs neither a GPU nor a finished demo run, at ``--quick``.

What ``make bench`` runs. Each bench runs in its own process (``python bench/<name>.py --quick
--json DIR/<name>.json``), one after another, with ``COA_STORAGE_ROOT`` set to a fresh folder (the
benches that build the demo's plan at tiny sizes build it there). This runner's own record holds
each bench's wall time, its exit status and its ratios (each against its own baseline, from its
record). A failed bench fails the run; the rest still run.

    PYTHONPATH=. python bench/quick.py [--only bench_contract,bench_tracking] [--skip bench_ray] \\
        [--out-dir bench-results] [--json quick.json]

The benches it leaves out, and why, are in ``NEEDS``; a test checks that every ``bench_*.py`` is in
one list or the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Bench, main

HERE = Path(__file__).resolve().parent

QUICK = (
    "bench_contract",
    "bench_tracking",
    "bench_batching",
    "bench_collect",
    "bench_sandbox",
    "bench_rollout",
    "bench_pretrain_adamw",
    "bench_sft_head",
    "bench_sft_heldout",
    "bench_step_memory",
    "bench_rl_async",
    "bench_curate_convert",
    "bench_ray",
    "bench_demo_seeds",
    "bench_copy_learning",
    "bench_viewer",
)
"""In this order: the fastest first, so a broken harness shows in seconds."""

NEEDS = {
    "bench_sft_gpu": "a CUDA GPU (infra/gpu-check.sh runs it)",
    "bench_rl_gpu": "a CUDA GPU (infra/gpu-check.sh runs it)",
    "bench_sample_schedule": "a finished `make demo` run's store",
    "bench_rl_vs_sft": "a finished `make demo` run's store",
    "bench_word_copy": "a finished `make demo` run's artifacts",
}
"""The benches outside the quick set, with what they need."""


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", default="", help="comma-separated benches to run (default: the quick set)")
    parser.add_argument("--skip", default="", help="comma-separated benches to leave out")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep each bench's record here")


def run(args: argparse.Namespace, bench: Bench) -> None:
    only = [b for b in args.only.split(",") if b]
    skip = {b for b in args.skip.split(",") if b}
    unknown = (set(only) | skip) - set(QUICK) - set(NEEDS)
    if unknown:
        raise SystemExit(f"unknown bench(es) {sorted(unknown)}; the quick set: {', '.join(QUICK)}")
    names = [b for b in (only or QUICK) if b not in skip]
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="coa-bench-quick-") as tmp:
        out_dir = args.out_dir or Path(tmp) / "records"
        out_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "COA_STORAGE_ROOT": str(Path(tmp) / "store")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH", "")) if p)
        for name in names:
            record = out_dir / f"{name}.json"
            command = [sys.executable, str(HERE / f"{name}.py"), "--quick", "--json", str(record)]
            print(f"\n=== {name} --quick", flush=True)
            start = time.perf_counter()
            status = subprocess.run(command, cwd=HERE, env=env, check=False).returncode
            bench.add_timing(name, [time.perf_counter() - start])
            ratios = json.loads(record.read_text())["ratios"] if status == 0 and record.is_file() else {}
            bench.figure(name, {"status": status, "ratios": ratios})
            if status != 0:
                failed.append(name)
    print("\n=== the quick set")
    for name in names:
        took, status = bench.timings[name].best, bench.figures[name]["status"]
        print(f"{name:<24} {'ok' if status == 0 else f'FAILED ({status})':<12} {took:7.1f} s")
    bench.figure("failed", failed)


if __name__ == "__main__":
    record = main(run, __doc__, extra=arguments)
    sys.exit(1 if record["figures"]["failed"] else 0)
