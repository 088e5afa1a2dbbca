"""The step runner: content key, reuse, commit, failure markers, failed checks, plans and slices."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

import schemas
from coa import io
from coa.attempts import failure_marker
from coa.errors import UserError
from coa.plan import load_pipeline_config, plan
from coa.plan.preview import preview, select
from coa.steps import (
    Build,
    ModelInput,
    Stage,
    Step,
    StepCheckFailed,
    StepSummary,
    TableInput,
    Upstream,
    accepted_contracts,
    run_step,
)
from tests import storage_cases as cases

REPO = Path(__file__).resolve().parents[1]
CALLS: list[str] = []


class Made(StepSummary):
    n: int


class Counted(StepSummary):
    count: int


def _tasks_step(n: int, name: str = "make") -> Step:
    def build(b: Build) -> None:
        CALLS.append(b.step.name)
        table = cases.tasks_table(b.step.config["n"])
        b.writer.write_table("tasks", table, schemas.TASK)
        b.report(Made(n=table.num_rows))

    return Step(name=name, stage=Stage(name, "tasks", build), artifact="unit", config={"n": n})


def _count_step(fail: str | None = None, crash: bool = False) -> Step:
    def build(b: Build) -> None:
        CALLS.append(b.step.name)
        if crash:
            raise RuntimeError("disk on fire")
        n = b.table("tasks").rows()
        b.writer.write_file("count.txt", str(n))
        b.report(Counted(count=n))
        if fail:
            b.fail(fail)

    return Step(
        name="count",
        stage=Stage("count", "report", build),
        artifact="count",
        config={"v": 1},
        inputs={"tasks": Upstream("make")},
    )


def test_reuse_is_by_content_key_and_the_summary_comes_back(tmp_path: Path) -> None:
    store, CALLS[:] = io.Store(str(tmp_path)), []
    first = run_step(_tasks_step(3), store)
    again = run_step(_tasks_step(3), store)
    other = run_step(_tasks_step(4), store)
    assert CALLS == ["make", "make"]  # the second run of n=3 built nothing
    assert again.reused and again.ref == first.ref and again.summary == {"n": 3}
    assert other.ref.uri != first.ref.uri
    lineage = io.read_lineage(first.ref)
    assert lineage["step"] == "make" and lineage["result"]["summary"] == {"n": 3}


def test_upstream_content_decides_the_key(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    three, four = run_step(_tasks_step(3), store), run_step(_tasks_step(4), store)
    a = run_step(_count_step(), store, {"make": three})
    b = run_step(_count_step(), store, {"make": four})
    assert a.ref.uri != b.ref.uri and (a.summary, b.summary) == ({"count": 3}, {"count": 4})
    assert io.read_lineage(a.ref)["inputs"] == {"tasks": {"uri": three.ref.uri, "table": "tasks"}}


def test_a_crash_commits_nothing_and_leaves_a_failure_marker(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    made = run_step(_tasks_step(2), store)
    with pytest.raises(RuntimeError, match="disk on fire"):
        run_step(_count_step(crash=True), store, {"make": made})
    (planned,) = [p for p in preview([_tasks_step(2), _count_step()], store) if p.name == "count"]
    assert planned.status.startswith("build (last attempt failed: disk on fire")
    assert planned.uri is not None and io.lookup(planned.uri) is None
    marker = Path(failure_marker(planned.uri))
    assert marker.is_file() and not Path(planned.uri).exists()  # the marker lives outside the artifact
    rerun = run_step(_count_step(), store, {"make": made})  # the rerun builds, and clears the marker
    assert rerun.ref.uri == planned.uri and not marker.exists()
    assert sorted(p.name for p in Path(rerun.ref.uri).iterdir()) == sorted(
        [*rerun.ref.files, io.LINEAGE, io.MANIFEST]
    )  # the committed folder holds exactly what its manifest lists


def test_a_failed_check_commits_its_evidence_and_fails_the_same_way_every_time(tmp_path: Path) -> None:
    store, CALLS[:] = io.Store(str(tmp_path)), []
    made = run_step(_tasks_step(2), store)
    step = _count_step(fail="too few rows (2 < 5)")
    with pytest.raises(StepCheckFailed) as first:
        run_step(step, store, {"make": made})
    assert "count.txt" in io.open_artifact(first.value.uri).files  # the evidence is readable
    with pytest.raises(StepCheckFailed) as second:
        run_step(step, store, {"make": made})
    assert str(first.value) == str(second.value) and first.value.exit_code == 1
    assert CALLS == ["make", "count"]  # the rerun did not build again


def test_only_runs_a_slice_and_reuses_what_is_in_front(tmp_path: Path) -> None:
    steps = [_tasks_step(2), _count_step()]
    assert [(s.name, run) for s, run in select(steps, ["count"])] == [("make", False), ("count", True)]
    assert [s.name for s, _ in select(steps, None)] == ["make", "count"]
    with pytest.raises(UserError, match="no such stage"):
        select(steps, ["nope"])
    store = io.Store(str(tmp_path))
    with pytest.raises(UserError, match="run it first"):
        run_step(steps[0], store, reuse_only=True)


def test_model_inputs_need_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ModelInput()
    assert ModelInput.parse("Qwen/Qwen2.5-0.5B").external == "Qwen/Qwen2.5-0.5B"


def test_the_demo_plan_reads_as_the_list_of_stages() -> None:
    steps = plan(load_pipeline_config(REPO / "configs" / "demo.yaml"))
    assert [s.name for s in steps] == [
        "synthetic", "collect", "curate", "convert", "student", "sft",
        "evaluate.before", "evaluate.after",
        "sample.r1", "curate.r2", "convert.r2", "sft.r2", "evaluate.after_r2",
        "rl", "evaluate.after_rl", "collect.heldout", "report",
    ]  # fmt: skip
    names = {s.name for s in steps}
    for step in steps:  # every upstream reference names an earlier step
        for value in step.inputs.values():
            if isinstance(value, Upstream):
                assert value.step in names and steps.index(step) > [s.name for s in steps].index(value.step)


def test_preview_keys_match_the_run(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    steps = [_tasks_step(2), _count_step()]
    before = preview(steps, store)
    assert before[0].status == "build" and before[0].key and before[1].key is None
    made = run_step(steps[0], store)
    after = preview(steps, store)
    assert after[0].status == "reuse" and after[0].uri == made.ref.uri and after[0].key == made.ref.key
    counted = run_step(steps[1], store, {"make": made})
    assert preview(steps, store)[1].key == counted.ref.key


def test_table_input_reads_through_the_contract(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    made = run_step(_tasks_step(2), store)
    table = TableInput(made.ref, "tasks").read(["task_id"])
    assert isinstance(table, pa.Table) and table.num_rows == 2


def test_every_input_contract_matches_its_upstream_output() -> None:
    """In the demo plan, what each step expects of an input is what the step it reads produces."""
    steps = plan(load_pipeline_config(REPO / "configs" / "demo.yaml"))
    by_name = {s.name: s for s in steps}
    checked = 0
    for step in steps:
        for role, value in step.inputs.items():
            if not isinstance(value, Upstream) or role not in step.expects:
                continue
            producer = by_name[value.step]
            assert value.table in producer.produces, (step.name, role, value)
            assert producer.produces[value.table] in accepted_contracts(step.expects[role]), (step.name, role)
            checked += 1
    assert checked >= 10


def test_a_wrong_artifact_is_refused_by_contract(tmp_path: Path) -> None:
    from coa.curate.config import CurateConfig
    from coa.curate.step import step as curate_step

    store = io.Store(str(tmp_path))
    tasks = TableInput(run_step(_tasks_step(2), store).ref, "tasks")
    with pytest.raises(
        UserError, match=r"input 'raw' must be a trajectory.v1 or rollout.v1 table, but .* is task.v1"
    ):
        run_step(curate_step(CurateConfig(), raw=tasks, tasks=tasks), store)


def test_retry_failed_switch_puts_the_repair_between_collect_and_curate() -> None:
    config = load_pipeline_config(REPO / "configs" / "demo.yaml", ["collect.retry_failed=true"])
    steps = {s.name: s for s in plan(config)}
    assert steps["collect.retry"].inputs["previous"] == Upstream("collect", "trajectories")
    assert steps["curate"].inputs["raw"] == Upstream("collect.retry", "trajectories")


def test_preview_shows_a_damaged_artifact_and_the_run_names_it(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    made = run_step(_tasks_step(2), store)
    table = Path(made.ref.uri) / "tasks.parquet"
    table.write_bytes(table.read_bytes()[:-10])  # truncated after its commit
    (planned,) = preview([_tasks_step(2)], store)
    assert planned.status.startswith("damaged (tasks.parquet differs from its manifest)")
    with pytest.raises(io.IntegrityError, match=rf"file tasks\.parquet of artifact {made.ref.uri} has"):
        run_step(_tasks_step(2), store)
    rebuilt = run_step(_tasks_step(2), store)  # the next run rebuilds it at the same key
    assert not rebuilt.reused and rebuilt.ref.uri == made.ref.uri
    assert len(list((tmp_path / io.DAMAGED_DIR / made.ref.kind).iterdir())) == 1


def test_a_stage_that_presents_nothing_shows_its_summary_figures(tmp_path: Path) -> None:
    from coa.facts import Table

    store = io.Store(str(tmp_path))
    result = dataclasses.replace(run_step(_tasks_step(2), store), summary={"n": 2, "by": {"a": 1}})
    shown = _tasks_step(2).stage.summary_facts(result)
    assert len(shown.items) == 1 and isinstance(shown.items[0], Table)
    assert list(shown.items[0].rows) == [{"metric": "n", "value": 2}] and shown.warnings == ()


def test_finish_adds_to_the_commit_and_its_failure_commits_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from coa.view.commit import PAGE_FILE, commit_page

    store = io.Store(str(tmp_path))
    seen: list[str] = []

    def finish(writer: io.ArtifactWriter) -> None:
        seen.append(writer.uri)
        assert commit_page(writer) is None  # tasks are no episodes: no page
        writer.write_file("extra.txt", "added")

    made = run_step(_tasks_step(5), store, finish=finish)
    assert seen == [made.ref.uri] and "extra.txt" in made.ref.files and PAGE_FILE not in made.ref.files
    assert run_step(_tasks_step(5), store, finish=finish).reused and len(seen) == 1  # reuse: no finish

    def broken(writer: io.ArtifactWriter) -> None:
        raise ValueError("no page today")

    with caplog.at_level("WARNING", logger="coa.steps"):
        other = run_step(_tasks_step(6), store, finish=broken)
    assert not other.reused and io.read_table(other.ref, "tasks").num_rows == 6  # committed all the same
    assert "step make: broken failed (ValueError: no page today); committed without it" in caplog.text
