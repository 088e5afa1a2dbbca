"""Run a profile's plan in this process, without Prefect: for a GPU machine whose image lacks it.

The lent H100/H200 image has torch, transformers and accelerate but no Prefect (and reaches no package
registry), so ``coa run`` cannot start there. This runs the same plan (:func:`coa.plan.plan`) with
the same plan runner as the flows (:class:`coa.plan.runner.PlanRun`), handed the plain step runner
(:func:`coa.plan.runner.plain`: :func:`coa.steps.run_step`, which the pipeline's Prefect task calls
too): every step is reused when its artifact is committed, else built and committed, so a run stopped
at a time limit resumes where it stopped; a failed step stops the run (exit 1, its one-line reason).
It prints each step's wall time and, when the report step ran, the training report's comparison;
``--json`` writes the stage table and the comparison.

    python3 infra/run_plan.py -c configs/demo-gpu.yaml [key=value ...] [--until convert] [--json F]
    python3 infra/run_plan.py -c configs/demo-gpu.yaml --dry-run   # each step: reused or built, nothing run

``--cpu-steps`` builds only the steps that run no model and read only such steps (the tasks, the
teacher's runs, held-out ones included, curation, conversion: :attr:`coa.steps.Stage.runs_model`), to
build them where the CPU is cheap and carry the store to the GPU; ``--until STEP`` stops after that
step. ``--expect-reused STEP`` (or ``cpu``: every CPU step) is the other end of that: before anything
runs, every step up to STEP must be committed in the store, else it stops (exit 4) naming the steps it
would build:
a store carried for other code or another config has none of this plan's keys (they hold the source
hash, ``coa/version.py``), and rebuilding them would spend the GPU's minutes on CPU work. The store
is ``COA_STORAGE_ROOT`` as for every ``coa`` command.
"""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

from coa import io
from coa.evaluate.training_report import format_comparison
from coa.plan import plan
from coa.plan.config import load_pipeline_config
from coa.plan.preview import preview
from coa.plan.run_result import run_result
from coa.plan.runner import Plan, PlanRun, StepRunner, on_cpu, plain
from coa.steps import Step, StepResult
from coa.view.commit import commit_page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, as for `coa run`")
    parser.add_argument("-c", "--config", default="configs/demo-gpu.yaml", help="YAML profile")
    parser.add_argument("--until", help="stop after this step (its name as `coa run --dry-run` lists it)")
    parser.add_argument("--json", type=Path, help="write the stage table and the comparison here")
    parser.add_argument(
        "--no-pages",
        action="store_true",
        help="commit no viewer page (episodes.html) with the artifacts: what gpu-prepare.sh carries to a "
        "device counts against its 64 MiB, and a page of 2,000 runs is ~9 MB (`coa view` makes one later)",
    )
    parser.add_argument(
        "--cpu-steps",
        action="store_true",
        help="run only the steps that run no model nor read its output",
    )
    parser.add_argument(
        "--expect-reused",
        metavar="STEP",
        help="stop (exit 4) unless every step up to STEP (cpu: every CPU step) is in the store",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print whether each step would be reused or built; run none"
    )
    args = parser.parse_args(argv)

    cfg = load_pipeline_config(args.config, args.overrides)
    steps = plan(cfg)
    names = [step.name for step in steps]
    for option, name in (("--until", args.until), ("--expect-reused", args.expect_reused)):
        if name and name not in names and not (option == "--expect-reused" and name == "cpu"):
            parser.error(f"{option} {name!r} is no step of this plan: {', '.join(names)}")
    if args.cpu_steps:
        steps = on_cpu(steps)
        names = [step.name for step in steps]
    store = io.Store()
    print(f"plan {cfg.run_name!r} ({args.config}): {' -> '.join(names)}; store {store.root}", flush=True)
    if args.expect_reused and (missing := not_in_store(steps, store, args.expect_reused)):
        print(
            f"error: {', '.join(missing)} would be built, not reused: the store at {store.root} holds no "
            f"artifact of this plan's keys for them (built for other code, see coa/version.py, or another "
            f"config). Rebuild it where the CPU is cheap (bash infra/gpu-prepare.sh) and carry it again, "
            f"or drop --expect-reused to build them here",
            file=sys.stderr,
            flush=True,
        )
        return 4
    if args.dry_run:
        for planned in preview(steps, store):
            print(f"{planned.name:28s} {planned.status}", flush=True)
        return 0
    run, started = PlanRun(steps), time.monotonic()

    def after(step: Step, result: StepResult) -> str | None:
        if args.json:  # after every step: a run stopped at a time limit still leaves its table
            args.json.write_text(run_result(cfg, steps, run.done).model_dump_json(indent=1))
        return f"--until {step.name}" if step.name == args.until else None

    # `timeout` stops it with SIGTERM: the steps done so far are still reported (the finally below)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        run.run(said(plain(store, finish=None if args.no_pages else commit_page), started), after=after)
    finally:
        outcome = run_result(cfg, steps, run.done)
        for row in outcome.stages:
            if row.status in ("built", "reused"):
                wall = "" if row.wall_s is None else f"{row.wall_s:8.1f} s"
                rss = "" if row.peak_rss_mib is None else f"{row.peak_rss_mib:8.0f} MiB"
                rows = "" if row.rows is None else row.rows
                print(f"{row.stage:28s} {row.status:7s} {rows:>7} {wall} {rss}")
        if outcome.comparison:
            print(format_comparison(outcome.comparison))
        print(f"total {time.monotonic() - started:.1f} s", flush=True)
        if args.json:
            args.json.write_text(outcome.model_dump_json(indent=1))
    if run.failure is not None:
        print(f"error: {run.failure.step.name}: {run.failure.reason}", file=sys.stderr, flush=True)
        return 1
    return 0


def said(runner: StepRunner, started: float) -> StepRunner:
    """``runner``, saying each step as it starts and ends (how, how long, where), and an evaluation's
    headline as it ends: a run cut short (the GPU's device time) still reports them."""

    def run(step: Step, upstream: Mapping[str, StepResult], run_it: bool) -> StepResult | str:
        began = time.monotonic()
        print(f"--- {step.name} (at {began - started:.0f} s)", flush=True)
        result = runner(step, upstream, run_it)
        if isinstance(result, str):
            return result
        how = "reused" if result.reused else "built"
        print(f"--- {step.name}: {how} in {time.monotonic() - began:.1f} s: {result.ref.uri}", flush=True)
        if headline := result.summary.get("headline"):
            print(textwrap.indent(headline, "    "), flush=True)
        return result

    return run


def not_in_store(steps: Plan, store: io.Store, last: str) -> list[str]:
    """The steps up to ``last`` (included; ``cpu``: the CPU steps) that running the plan would build."""
    names = [step.name for step in steps]
    upto = on_cpu(steps) if last == "cpu" else steps[: names.index(last) + 1]
    return [planned.name for planned in preview(upto, store) if not planned.status.startswith("reuse")]


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
