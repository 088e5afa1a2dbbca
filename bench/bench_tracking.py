"""What a tracker costs a step: Trackio's local store beside TensorBoard's event files, side by side.

Per backend, in one process each (Trackio reads ``TRACKIO_DIR`` once, at import): a trainer-like
run logging ``--points`` points of 6 scalars (what the trainers' ``report_to`` callbacks do, once
per ``logging_steps``; opening the run timed apart), then ``coa.tracking.log_summary`` of an
evaluation-sized summary for ``--steps`` steps (what every built step adds). Wall and CPU time, the
median of ``--repeat`` runs; the backends alternate so the shared host's load hits both alike.

    PYTHONPATH=. python bench/bench_tracking.py --points 200 --steps 10 --repeat 3 [--json F]
    PYTHONPATH=. python bench/bench_tracking.py --quick   # 20 points, 2 steps, once
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Bench, main

SUMMARY = {
    "metrics": {f: {"pass@1": 0.5, "pass@1_se": 0.1, "maj@4": 0.6, "n": 50, "tokens_per_task": 812.0}
                for f in ("all", "math", "code", "web")},
    "headline": "pass@1 0.50 ± 0.10 on 50 tasks",
}  # fmt: skip


def one(backend: str, points: int, steps: int, folder: Path) -> dict[str, float]:
    """Run in a fresh process (``--child``): seconds per point and per step, wall and CPU."""
    from coa import tracking
    from coa.tracking.config import TrackingConfig

    config = TrackingConfig(backend=backend, experiment="bench", log_dir=str(folder))  # type: ignore[arg-type]
    out: dict[str, float] = {}
    with tracking.activate(config), tracking.step_run("sft", "file:///b/model-1", [], None) as run:
        assert run is not None  # imports outside the timings (TensorBoard's imports torch)
        if backend == "trackio":
            import trackio  # here: TRACKIO_DIR is the run's folder from now on in this process
        else:
            from torch.utils.tensorboard import SummaryWriter
        wall, cpu = time.perf_counter(), time.process_time()
        if backend == "trackio":
            trackio.init(project="bench", name=run.name, embed=False, auto_log_cpu=False, auto_log_gpu=False)
        else:
            writer = SummaryWriter(log_dir=run.location)
        out["open_wall"], out["open_cpu"] = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(points):
            if backend == "trackio":
                trackio.log({f"train/m{k}": 1.0 / (i + k + 1) for k in range(6)})
            else:
                for k in range(6):
                    writer.add_scalar(f"train/m{k}", 1.0 / (i + k + 1), i)
        if backend == "trackio":
            trackio.finish()  # the points are written by then
        else:
            writer.close()
        out["point_wall"] = (time.perf_counter() - wall) / points
        out["point_cpu"] = (time.process_time() - cpu) / points
    wall, cpu = time.perf_counter(), time.process_time()
    for s in range(steps):
        with tracking.activate(config), tracking.step_run("evaluate", f"file:///b/eval-{s}", [], None) as run:
            tracking.log_summary(run, SUMMARY)
    out["step_wall"] = (time.perf_counter() - wall) / steps
    out["step_cpu"] = (time.process_time() - cpu) / steps
    return out


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--child", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.points, args.steps, args.repeat = 20, 2, 1
    if args.child:
        folder = Path(tempfile.mkdtemp(prefix="coa-bench-tracking-"))
        print(json.dumps(one(args.child, args.points, args.steps, folder)))
        return
    results: dict[str, list[dict[str, float]]] = {"tensorboard": [], "trackio": []}
    for _ in range(args.repeat):
        for backend in results:
            command = [sys.executable, __file__, "--child", backend, "--points", str(args.points)]
            command += ["--steps", str(args.steps)]
            done = subprocess.run(command, capture_output=True, text=True, check=True, env=dict(os.environ))
            results[backend].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{args.points} points of 6 scalars, {args.steps} step summaries; median of {args.repeat}")
    print("| backend | open the run, ms | per point, ms | per step summary, ms |  (each: wall / CPU)")
    print("|---|---|---|---|")
    for backend, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) * 1000 for k in runs[0]}
        print(f"| {backend} | {med['open_wall']:.1f} / {med['open_cpu']:.1f} "
              f"| {med['point_wall']:.2f} / {med['point_cpu']:.2f} "
              f"| {med['step_wall']:.1f} / {med['step_cpu']:.1f} |")  # fmt: skip
        for key in ("open", "point", "step"):
            bench.add_timing(f"{backend} {key} wall", [r[f"{key}_wall"] for r in runs])
            bench.figure(f"{backend} {key} cpu s (median)", statistics.median(r[f"{key}_cpu"] for r in runs))
    for key in ("point", "step"):
        ours, base = bench.timings[f"trackio {key} wall"], bench.timings[f"tensorboard {key} wall"]
        bench.ratio(f"trackio / tensorboard per {key}, wall", ours.median, base.median)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
