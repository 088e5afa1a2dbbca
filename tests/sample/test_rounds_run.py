"""A tiny two-round run: the round-1 student's samples (a scripted policy on its tokenizer, right on
half the tasks) are curated beside the teacher's runs, only the verified-correct ones kept, with
their provenance; round 2 fine-tunes the round-1 model; the report has the round's column; a rerun
reuses every artifact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coa import io
from coa.curate.step import CurateSummary
from coa.evaluate.summary import TrainingReportSummary
from coa.plan import load_pipeline_config, plan
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.sample import step as sample_step
from coa.sample.config import SampleConfig
from coa.sample.summary import SampleSummary
from coa.steps import StepResult, run_step
from tests.flows.test_pipeline_flow import SMALL
from tests.rollout.helpers import blocks

REPO = Path(__file__).resolve().parents[2]
ROUNDS = [
    *SMALL,
    "rl=null",
    "rounds=2",
    "round_sft={max_steps: 2}",
    "sampling={families: [math], limit_per_family: 4, samples: 2, max_turns: 3, max_new_tokens: 512, "
    "max_total_tokens: 2048}",
]


def replies(task: dict[str, Any], right: bool) -> list[str]:
    """Two turns: a program in the sandbox, then the answer (the gold answer, or off by one)."""
    value = task["gold_answers"][0] if right else str(int(task["gold_answers"][0]) + 1)
    code = blocks(
        ("plan", "Compute it with code."), ("think", "Run it."), ("code", '```py\nprint("checked")\n```')
    )
    answer = blocks(
        ("reflection", "It printed the value."), ("think", "Answer."), ("answer", f"\\boxed{{{value}}}")
    )
    return [code, answer]


def run_plan(done: dict[str, StepResult]) -> None:
    cfg = load_pipeline_config(REPO / "configs/demo.yaml", ROUNDS)
    for step in plan(cfg):
        done[step.name] = run_step(step, io.Store(), done)


def test_two_rounds_train_round_two_on_the_students_correct_samples(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    done: dict[str, StepResult] = {}
    right: dict[str, bool] = {}

    def scripted(config: SampleConfig, model: str) -> ScriptedPolicy:
        tasks = io.read_table(done["synthetic"].ref, "train").to_pylist()
        math = [t for t in tasks if t["family"] == "math"][: config.limit_per_family or 0]
        right.update({t["task_id"]: i % 2 == 0 for i, t in enumerate(math)})
        script = {t["question"]: replies(t, right[t["task_id"]]) for t in math}
        return ScriptedPolicy(Codec.from_pretrained(model), script, name=model)

    monkeypatch.setattr(sample_step, "open_policy", scripted)
    run_plan(done)

    samples = io.read_table(done["sample.r1"].ref, "rollouts").to_pylist()
    assert len(samples) == 8 and {r["step"] for r in samples} == {1}  # 4 tasks x 2 samples, round 1
    assert all(r["format_valid"] for r in samples), [r["text"] for r in samples if not r["format_valid"]][:1]
    assert [r["correct"] for r in samples] == [right[r["task_id"]] for r in samples]
    sampled = SampleSummary.from_dict(done["sample.r1"].summary)
    assert (sampled.round, sampled.families["math"].tasks_solved, sampled.families["all"].kept) == (1, 0.5, 4)

    curated = done["curate.r2"].ref
    lineage = io.read_lineage(curated)
    assert lineage["student"]["round"] == 1 and lineage["student"]["source"] == done["sample.r1"].ref.uri
    assert (lineage["student"]["selected"], lineage["student"]["incorrect"]) == (4, 4)
    counted = CurateSummary.from_dict(done["curate.r2"].summary).student
    assert counted is not None and counted["rollouts"] == 8 and counted["selected"] == 4
    runs = io.read_table(curated, "trajectories").to_pylist()
    student = [r for r in runs if r["teacher"] == "student-r1"]
    solved = {t for t, ok in right.items() if ok}
    assert {
        r["task_id"] for r in student
    } == solved  # only the correct ones, one per task (the twin is a duplicate)
    assert all(r["correct"] and json.loads(r["teacher_config"])["round"] == 1 for r in student)
    teacher = [r for r in runs if r["teacher"] != "student-r1"]
    first = io.read_table(done["curate"].ref, "trajectories")
    assert len(teacher) == first.num_rows  # the teacher's runs, as round 1 curated them

    sft_rows = io.read_table(done["convert.r2"].ref, "sft").to_pylist()
    by_run = {r["run_id"]: r for r in runs}
    from_student = [e for e in sft_rows if by_run[e["run_id"]]["teacher"] == "student-r1"]
    assert {e["task_id"] for e in from_student} == solved
    assert io.read_lineage(done["sft.r2"].ref)["inputs"]["base"]["uri"] == done["sft"].ref.uri

    rows = done["report"].summary["comparison"]
    assert all("accuracy_after_r2" in r for r in rows)
    assert "acc. round 2" in io.read_file(done["report"].ref, "report.html").decode()
    changes = TrainingReportSummary.from_dict(done["report"].summary).changes
    assert [(c.step, c.against) for c in changes] == [("SFT", "before SFT"), ("round 2", "SFT")]
    evaluated = io.read_table(done["evaluate.after"].ref, "eval").num_rows
    assert evaluated > 0 and all(c.deltas["all"].pairs == evaluated for c in changes)  # the same tasks
    assert json.loads(io.read_file(done["report"].ref, "changes.json"))[1]["step"] == "round 2"

    again: dict[str, StepResult] = {}
    run_plan(again)
    assert all(r.reused for r in again.values())
    assert {n: r.ref.uri for n, r in again.items()} == {n: r.ref.uri for n, r in done.items()}
