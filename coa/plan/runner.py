"""A plan as a typed object, and the one loop that runs any plan (Prefect-free).

A :class:`Plan` is its steps, in order, each wired to the steps it reads by reference
(:meth:`coa.steps.Step.output`), and its named outputs (the curation, the training report; a night's
gate and candidate: :class:`coa.plan.nightly.NightlyPlan`), so a caller reads ``plan.report``, never
a step by its name.

:meth:`PlanRun.run` runs a plan in order with the step runner it is handed (a :data:`StepRunner`:
the Prefect task or the GPU pool's dispatch in the flows, :func:`plain` in ``infra/run_plan.py``),
each step getting only the results it reads; ``only`` runs a slice (:func:`coa.plan.preview.select`:
the steps in front of it are only reused); it stops at the first failure, or where the caller's
``after`` says to stop. The flows, ``coa run`` (through the pipeline flow) and the plain runner all
run plans here.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from coa import io
from coa.errors import CoaError, describe
from coa.plan.preview import select
from coa.steps import Finish, Step, StepResult, Upstream, run_step

StepRunner = Callable[[Step, Mapping[str, StepResult], bool], "StepResult | str"]
"""Runs one step: the step, the results of the steps it reads, and whether to build it (False: only
reuse its committed artifact) → its result, or the one line saying why it failed."""
After = Callable[[Step, StepResult], "str | None"]
"""Called after each step that succeeded: a reason to stop the run there (not a failure), or None."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan(Sequence[Step]):
    """The steps of a run, in order, and its named outputs (None where the plan has no such step)."""

    steps: tuple[Step, ...]
    curated: Step | None = None
    """The curation whose report a run shows (the first round's)."""
    report: Step | None = None
    """The training report (the pipeline's last step)."""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for step in self.steps:
            if step.name in seen:
                raise ValueError(f"two steps of a plan are named {step.name!r}: a bug in the plan")
            missing = [v.step for v in step.inputs.values() if isinstance(v, Upstream) and v.step not in seen]
            if missing:
                raise ValueError(f"step {step.name} reads {missing}, which the plan does not run before it")
            seen.add(step.name)

    @overload
    def __getitem__(self, index: int) -> Step: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Step]: ...
    def __getitem__(self, index: int | slice) -> Step | Sequence[Step]:
        return self.steps[index]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)


@dataclasses.dataclass(frozen=True)
class Failure:
    """Where a run stopped on a failure: the step and its one-line reason."""

    step: Step
    reason: str


class PlanRun:
    """A run of a plan: the results so far (filled as it goes, so a run cut short still shows what it
    did), each step's seconds, and the failure or the reason it stopped early."""

    def __init__(self, plan: Sequence[Step]) -> None:
        self.plan = plan
        self.done: dict[str, StepResult] = {}
        """Step name → its result, in the order they finished."""
        self.seconds: dict[str, float] = {}
        self.failure: Failure | None = None
        self.stopped: str | None = None

    def __getitem__(self, step: Step) -> StepResult:
        return self.done[step.name]

    def get(self, step: Step | None) -> StepResult | None:
        """``step``'s result, None when it has none (not run, or no such step)."""
        return None if step is None else self.done.get(step.name)

    def summary(self, step: Step | None) -> Mapping[str, Any]:
        """``step``'s summary (empty when it has no result)."""
        result = self.get(step)
        return {} if result is None else result.summary

    def run(
        self, runner: StepRunner, only: Sequence[str] | None = None, after: After | None = None
    ) -> PlanRun:
        """Run the plan's steps (``only``: a slice) in order through ``runner``; stop at the first
        failure (:attr:`failure`) or where ``after`` gives a reason (:attr:`stopped`).

        Each step's code version is computed first, on the calling thread (a flow's own), so that the
        task threads that run the steps read it from the cache rather than each compile the same
        import closure (about a second for the whole tree on 2 cores) while the others wait on the GIL."""
        for step in self.plan:
            step.stage.code_version()
        for step, run_it in select(self.plan, only):
            start = time.perf_counter()
            outcome = runner(step, upstream_of(step, self.done), run_it)
            if isinstance(outcome, str):
                self.failure = Failure(step, outcome)
                return self
            self.done[step.name] = outcome
            self.seconds[step.name] = round(time.perf_counter() - start, 2)
            if after is not None and (why := after(step, outcome)) is not None:
                self.stopped = why
                return self
        return self


def upstream_of(step: Step, done: Mapping[str, StepResult]) -> dict[str, StepResult]:
    """The results of the steps ``step`` reads (its :class:`~coa.steps.Upstream` inputs), and only
    those: a Prefect task's run graph draws an edge from each."""
    names = _reads(step)
    return {name: result for name, result in done.items() if name in names}


def on_cpu(plan: Plan) -> Plan:
    """The part of ``plan`` a CPU builds: the steps that run no model
    (:attr:`coa.steps.Stage.runs_model`) and read only such steps, in plan order (``infra/run_plan.py
    --cpu-steps`` builds them where the CPU is cheap, before a GPU machine runs the rest)."""
    kept: dict[str, Step] = {}
    for step in plan:
        if not step.stage.runs_model and _reads(step) <= kept.keys():
            kept[step.name] = step
    return dataclasses.replace(plan, steps=tuple(kept.values()))


def _reads(step: Step) -> set[str]:
    return {value.step for value in step.inputs.values() if isinstance(value, Upstream)}


def plain(store: io.Store | None = None, finish: Finish | None = None) -> StepRunner:
    """The step runner without an orchestrator: :func:`coa.steps.run_step` in this process, a project
    error (:class:`~coa.errors.CoaError`) becoming its one-line reason."""

    def run(step: Step, upstream: Mapping[str, StepResult], run_it: bool) -> StepResult | str:
        try:
            return run_step(step, store, upstream, reuse_only=not run_it, finish=finish)
        except CoaError as e:
            return describe(e)

    return run
