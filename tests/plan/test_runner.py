"""The one plan runner (:mod:`coa.plan.runner`) and the plans' wiring by reference.

A plan of tiny steps runs through an injected step runner that records what it is asked: the order,
the results each step gets (only those it reads), ``only``'s slice (the steps in front are only
reused), the first failure stopping the run, a caller's stop. The plain runner runs the same plan
against a store. The last tests read the source: no step is wired by a name in the plans, the flows,
``coa run`` or ``infra/run_plan.py``, and each flow stays a short list of steps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

import schemas
from coa import io
from coa.io import ArtifactRef, TableInfo
from coa.plan.runner import Plan, PlanRun, StepRunner, plain
from coa.steps import Build, Stage, Step, StepResult, StepSummary
from tests import storage_cases as cases

REPO = Path(__file__).resolve().parents[2]


class Made(StepSummary):
    rows: int


def _build(b: Build) -> None:
    """Writes a task table: as many rows as its config says, plus those of the table it reads."""
    upstream = b.optional("tasks")
    n = b.step.config["n"] + (upstream.rows() if upstream is not None else 0)  # type: ignore[union-attr]
    b.writer.write_table("tasks", cases.tasks_table(n), schemas.TASK)
    b.report(Made(rows=n))


STAGE = Stage("tiny", "tasks", _build, produces={"tasks": schemas.TASK.id})


def _plan() -> Plan:
    """a → b → c, and d reading a: wired by reference."""
    a = Step("a", STAGE, "a", {"n": 1})
    b = Step("b", STAGE, "b", {"n": 2}, inputs={"tasks": a.output("tasks")})
    c = Step("c", STAGE, "c", {"n": 3}, inputs={"tasks": b.output("tasks")})
    d = Step("d", STAGE, "d", {"n": 4}, inputs={"tasks": a.output("tasks")})
    return Plan(steps=(a, b, c, d), report=c)


Calls = list[tuple[str, bool, list[str]]]
"""What the recording runner was asked: (step, run it, the results it got)."""


def _recording(calls: Calls, fail: str | None = None) -> StepRunner:
    def run(step: Step, upstream: Mapping[str, StepResult], run_it: bool) -> StepResult | str:
        calls.append((step.name, run_it, sorted(upstream)))
        if step.name == fail:
            return f"check failed: {step.name} broke"
        tables = {"tasks": TableInfo(schema_id=schemas.TASK.id, rows=1, files=())}
        ref = ArtifactRef(
            uri=f"mem://{step.name}", kind="tasks", name=step.name, key="k", content_hash="h", tables=tables
        )
        return StepResult(step.name, ref, not run_it, {})

    return run


def test_a_plan_runs_in_order_each_step_getting_only_the_results_it_reads() -> None:
    plan, calls = _plan(), Calls()
    run = PlanRun(plan).run(_recording(calls))
    assert calls == [("a", True, []), ("b", True, ["a"]), ("c", True, ["b"]), ("d", True, ["a"])]
    assert list(run.done) == ["a", "b", "c", "d"] and run.failure is None and run.stopped is None
    assert run[plan.steps[2]].ref.uri == "mem://c" and run.get(plan.report) is run[plan.steps[2]]
    assert set(run.seconds) == {"a", "b", "c", "d"}


def test_only_runs_the_slice_and_only_reuses_what_it_reads() -> None:
    calls = Calls()
    run = PlanRun(_plan()).run(_recording(calls), only=["c"])
    assert calls == [("a", False, []), ("b", False, ["a"]), ("c", True, ["b"])]  # d is outside the slice
    assert run.get(_plan().steps[3]) is None


def test_the_first_failure_stops_the_run_with_its_reason() -> None:
    plan, calls = _plan(), Calls()
    run = PlanRun(plan).run(_recording(calls, fail="b"))
    assert [c[0] for c in calls] == ["a", "b"] and list(run.done) == ["a"]
    assert run.failure is not None and run.failure.step is plan.steps[1]
    assert run.failure.reason == "check failed: b broke"


def test_the_caller_may_stop_the_run_after_a_step() -> None:
    plan, calls = _plan(), Calls()
    run = PlanRun(plan).run(
        _recording(calls), after=lambda step, _: "enough" if step is plan.steps[1] else None
    )
    assert list(run.done) == ["a", "b"] and run.stopped == "enough" and run.failure is None


def test_a_plan_refuses_a_step_wired_to_one_it_does_not_run_before() -> None:
    a, b, c, d = _plan().steps
    with pytest.raises(ValueError, match=r"step c reads \['b'\], which the plan does not run before it"):
        Plan(steps=(a, c, b))
    with pytest.raises(ValueError, match="two steps of a plan are named 'a'"):
        Plan(steps=(a, a))
    with pytest.raises(ValueError, match="step a writes no table 'eval'; its tables: tasks"):
        a.output("eval")


def test_the_plain_runner_builds_then_reuses_and_says_a_failure_in_one_line(tmp_path: Path) -> None:
    store, plan = io.Store(str(tmp_path)), _plan()
    first = PlanRun(plan).run(plain(store))
    assert [first[s].summary["rows"] for s in plan] == [1, 3, 6, 5] and not any(
        r.reused for r in first.done.values()
    )
    again = PlanRun(plan).run(plain(store), only=["d"])
    assert all(r.reused for r in again.done.values()) and list(again.done) == ["a", "d"]
    fresh = io.Store(str(tmp_path / "empty"))
    failed = PlanRun(plan).run(plain(fresh), only=["b"])  # a is only reused, and has no artifact here
    assert failed.failure is not None and failed.failure.step is plan.steps[0]
    assert failed.failure.reason.startswith("input error: step a has no committed artifact")


# -- the source: wiring by reference, short flows ------------------------------------------------------

WIRED = [*sorted((REPO / "coa" / "plan").glob("*.py")), *sorted((REPO / "flows").glob("*.py"))]
WIRED += [REPO / "infra" / "run_plan.py", REPO / "coa" / "_cli" / "run.py"]


@pytest.mark.parametrize("path", WIRED, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_step_is_wired_by_its_name(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not re.findall(r"\bUpstream\(", text), "wire a step by reference: producer.output(table)"
    assert not re.findall(r"done\[\s*[\"'A-Z]", text), "read a result by its step: run[plan.gate]"


@pytest.mark.parametrize("flow", ["pipeline", "nightly"])
def test_a_flow_reads_as_a_short_list_of_steps(flow: str) -> None:
    lines = (REPO / "flows" / f"{flow}.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60, f"flows/{flow}.py has {len(lines)} lines: move the work to coa/ or tasks/"
