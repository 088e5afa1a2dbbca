"""A round's sampling under the engine's two schedules: wall time, and whether a rerun draws the same ids.

Given a store holding a finished demo run (one committed ``synthetic`` and one round-1 ``sft``
artifact, found by their lineage's step name), the profile's ``sample.r1`` step is run by hand (its
config as the plan resolves it: ``configs/demo.yaml`` + overrides): the round-1 model samples the
step's training tasks ``samples`` times each, seeded (``torch.manual_seed(sampling.seed)`` as the
step does), with the real tools, under ``async`` and ``lockstep`` in turn, ``--repeat`` times each
(interleaved). Per run: wall seconds, generate calls, episodes correct and kept, a hash of every
episode's completion ids; then, per schedule, how many episodes came out with the same ids in every
run. ``lockstep`` should repeat all of them; ``async`` repeats those whose batches happened to be the
same. Nothing is written to the store.

Run: ``PYTHONPATH=. python bench/bench_sample_schedule.py [--store .coa/store] [--repeat 2]
[--quick: 4 tasks, twice each schedule] [--json F] [overrides…]`` (e.g. ``synthetic.seed=1
student.tiny.seed=1`` for a demo run under seed 1: the overrides only pick the step's config; the
model and tasks are the store's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from harness import Bench, main

from coa.errors import UserError
from coa.plan.config import load_pipeline_config
from coa.plan.pipeline import plan
from coa.sample.config import SampleConfig
from coa.sample.core import sample_tasks, select
from coa.sample.step import open_policy
from coa.tools.build import build_toolbox
from coa.tools.config import ToolsConfig

SCHEDULES = ("async", "lockstep")


def committed(store: Path, step: str) -> Path:
    """The one committed artifact of ``step`` in ``store`` (by its lineage)."""
    found = [
        lineage.parent
        for lineage in sorted(store.glob("*/*/_lineage.json"))
        if json.loads(lineage.read_text()).get("step") == step
    ]
    if len(found) != 1:
        raise UserError(
            f"{store}: {len(found)} committed {step!r} artifacts ({found}); point --store at one run's"
        )
    return found[0]


def sample_once(
    config: SampleConfig, tools: ToolsConfig, rows: list[dict[str, Any]], model: Path, pages: Any = None
) -> dict[str, Any]:
    import torch

    torch.manual_seed(config.seed)
    policy = open_policy(config, str(model / "model"))
    toolbox = build_toolbox(tools, None, collection=pages, fix="evaluate.tools")
    start = time.perf_counter()
    try:
        out = sample_tasks(rows, policy, toolbox, config, 1)
    finally:
        getattr(toolbox, "close", lambda: None)()
    wall = time.perf_counter() - start
    ids = [r["completion_ids"] for r in out]
    return {
        "schedule": config.schedule,
        "wall_s": round(wall, 1),
        "calls": policy.calls,
        "episodes": len(out),
        "correct": sum(r["correct"] for r in out),
        "kept": sum(r["kept"] for r in out),
        "ids": hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:12],
        "per_episode": [hashlib.sha256(json.dumps(i).encode()).hexdigest()[:12] for i in ids],
    }


REPO = Path(__file__).resolve().parents[1]


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="config overrides (dotted key=value)")
    parser.add_argument("--config", default=str(REPO / "configs" / "demo.yaml"))
    parser.add_argument("--store", default=".coa/store", type=Path)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.repeat = 2
    steps = {s.name: s for s in plan(load_pipeline_config(args.config, args.overrides))}
    if "sample.r1" not in steps:
        raise UserError(f"{args.config} has no sample.r1 step: set rounds: 2 or more")
    step = steps["sample.r1"]
    tools = ToolsConfig.model_validate(step.identity["tools"])
    tasks = committed(args.store, "synthetic")
    model = committed(args.store, "sft")
    import pyarrow.parquet as pq

    from coa.tools.collection import Collection

    rows = select(pq.read_table(tasks / "train.parquet").to_pylist(), step.config)
    pages = Collection.from_table(pq.read_table(tasks / "encyclopedia.parquet"))  # the synthetic step's
    if args.quick:
        rows = rows[:4]
    print(f"{model.name}: {len(rows)} tasks x {step.config.samples} samples, backend {step.config.backend}")
    print(f"{'schedule':>9} {'run':>4} {'wall s':>7} {'calls':>6} {'correct':>8} {'kept':>5} {'ids':>13}")
    runs: list[dict[str, Any]] = []
    for k in range(args.repeat):
        for schedule in SCHEDULES:
            config = step.config.model_copy(update={"schedule": schedule})
            one = sample_once(config, tools, rows, model, pages)
            runs.append(one)
            print(
                f"{schedule:>9} {k + 1:>4} {one['wall_s']:>7.1f} {one['calls']:>6} {one['correct']:>8} "
                f"{one['kept']:>5} {one['ids']:>13}"
            )
    for schedule in SCHEDULES:
        mine = [r["per_episode"] for r in runs if r["schedule"] == schedule]
        same = sum(len(set(column)) == 1 for column in zip(*mine, strict=True))
        walls = [r["wall_s"] for r in runs if r["schedule"] == schedule]
        print(
            f"{schedule}: the same ids in all {len(mine)} runs: {same}/{len(mine[0])} episodes; wall {walls}"
        )
        bench.add_timing(f"{schedule} sampling", walls)
        bench.figure(f"{schedule} episodes with the same ids in every run", [same, len(mine[0])])
    bench.ratio("lockstep / async wall", bench.timings["lockstep sampling"], bench.timings["async sampling"])
    bench.figure("runs", [{k: v for k, v in r.items() if k != "per_episode"} for r in runs])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
