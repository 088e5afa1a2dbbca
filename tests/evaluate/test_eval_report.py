"""The evaluation report: a candidate against a baseline (paired deltas) beside the teacher's runs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import schemas
from coa import io
from coa.evaluate.config import EvalConfig
from coa.evaluate.stage import evaluate_tasks
from coa.evaluate.step import eval_report_step
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.steps import TableInput, run_step
from tests.rollout.helpers import blocks

from .test_inference import codec, tiny_model  # noqa: F401 (fixtures)


def commit(
    store: io.Store, kind: str, name: str, table_name: str, table: pa.Table, contract: Any
) -> TableInput:
    writer = store.writer(kind, name, {"n": table.num_rows})
    writer.write_table(table_name, table, contract)
    return TableInput(writer.commit(), table_name)


def test_report_with_teacher_and_baseline(
    codec: Codec,  # noqa: F811
    synthetic_tasks: dict[str, Any],
    teacher_runs: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    tasks = synthetic_tasks["train"]
    rows = tasks.to_pylist()

    def replies(right: set[int]) -> dict[str, list[str]]:
        gold = [r["gold_answers"][0] if i in right else "0" for i, r in enumerate(rows)]
        answers = {r["question"][:60]: g for r, g in zip(rows, gold, strict=True)}
        return {q: [blocks(("think", "Known."), ("answer", a))] for q, a in answers.items()}

    config = EvalConfig(max_turns=2, max_new_tokens=96, max_total_tokens=192, prompt_style="brief", samples=4)
    nonzero = {i for i, r in enumerate(rows) if r["family"] != "code" and r["gold_answers"][0] != "0"}
    good = evaluate_tasks(tasks, ScriptedPolicy(codec, replies(nonzero), name="candidate"), None, config)
    half = set(sorted(nonzero)[: len(nonzero) // 2])
    base = evaluate_tasks(tasks, ScriptedPolicy(codec, replies(half), name="baseline"), None, config)
    store = io.Store(str(tmp_path / "store"))
    step = eval_report_step(
        "eval-report",
        commit(store, "eval", "candidate", "eval", good, schemas.EVAL),
        teacher=commit(store, "trajectories", "teacher", "runs", schemas.TRAJECTORY.from_rows(teacher_runs),
                       schemas.TRAJECTORY),
        tasks=commit(store, "tasks", "synthetic", "train", tasks, schemas.TASK),
        baseline=commit(store, "eval", "baseline", "eval", base, schemas.EVAL),
        bootstrap_samples=500,
    )  # fmt: skip
    built = run_step(step, store)
    document = json.loads(io.read_file(built.ref, "comparison.json"))
    deltas, tokens = document["baseline"], document["tokens"]
    assert set(deltas) == {*good.column("benchmark").to_pylist(), "all"}
    overall = deltas["all"]
    assert overall["pairs"] == good.num_rows and overall["delta"] == pytest.approx(
        (len(nonzero) - len(half)) / len(rows)
    )
    assert overall["low"] > 0  # the candidate is better on every pair it differs on
    assert tokens and tokens[-1]["benchmark"] == "all" and 0 < tokens[-1]["token_reduction"] < 1
    assert document["student"]["all"]["pass@1"] == pytest.approx(len(nonzero) / len(rows))
    headline = built.summary["headline"]
    assert "pass@1" in headline and "fewer tokens" in headline and "vs the baseline" in headline
    page = io.read_file(built.ref, "report.html").decode()
    assert len(re.findall(r"<img ", page)) == 3 and "paired bootstrap" in page and "95% CI" in page
    if os.environ.get("COA_KEEP_REPORT"):  # for a look in a browser
        Path(os.environ["COA_KEEP_REPORT"]).write_text(page)
