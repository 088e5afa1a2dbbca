"""bench/bench_rl_vs_sft.py end to end on a tiny pipeline run built in the test (steps run in process)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from safetensors.torch import load_file

from coa import io
from coa.errors import UserError
from coa.plan import load_pipeline_config, plan
from coa.steps import StepResult, run_step
from tests.bench.scripts import REPO, load_script, run_bench
from tests.flows.test_pipeline_flow import TINY_TRAINING

OVERRIDES = [
    "synthetic.train={arithmetic: 6, multihop: 0, programming: 6}",
    "synthetic.heldout={arithmetic: 2, programming: 2}",
    "curate.gate.correctness_floor=0.3",
    *TINY_TRAINING,
    "rl.families=[code]",  # RL on programming only (the demo picks its family: auto)
]
BUILT = ("synthetic", "collect", "curate", "convert", "student", "sft", "rl", "evaluate.after")


def load_bench() -> ModuleType:
    return load_script("bench_rl_vs_sft")


def weights(folder: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def build(config: Any, names: tuple[str, ...]) -> tuple[io.Store, dict[str, StepResult]]:
    """The plan's steps ``names`` built in process, in plan order."""
    store, done = io.Store(), dict[str, StepResult]()
    for step in plan(config):
        if step.name in names:
            done[step.name] = run_step(step, store, done)
    return store, done


@pytest.mark.sandbox  # the programming tasks are scored by running the model's program
def test_three_models_on_fresh_heldout_tasks_with_continued_sft_for_the_rl_time(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.rl.step import read_result

    monkeypatch.chdir(REPO)
    bench = load_bench()
    config = load_pipeline_config("configs/demo.yaml", OVERRIDES)
    with pytest.raises(UserError, match="no usable committed artifact"):
        bench.locate(config, io.Store())  # nothing built yet: a clear error, not a rebuild
    store, done = build(config, BUILT)

    out, work = tmp_path / "table.json", tmp_path / "work"
    argv = [*OVERRIDES, "--quick", "--heldout", "4", "--json", str(out), "--work-dir", str(work)]
    result = run_bench("bench_rl_vs_sft", argv)["figures"]["result"]

    assert json.loads(out.read_text())["figures"]["result"] == json.loads(json.dumps(result, default=str))
    assert result["family"] == "code" and result["heldout"] == 4
    rows = {r["model"]: r for r in result["models"]}
    assert list(rows) == ["sft", "rl", "continued_sft"]
    for row in rows.values():
        assert row["n"] == 4
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["format_valid"] <= 1.0
        assert row["tokens_per_task"] > 0
    for name in ("rl", "continued_sft"):
        d = rows[name]["delta_accuracy"]
        assert d["pairs"] == 4 and d["low"] <= d["delta"] <= d["high"]
        assert d["delta"] == pytest.approx(rows[name]["accuracy"] - rows["sft"]["accuracy"])
    # the continued SFT ran for the RL run's measured training time, on code examples, at the SFT
    # run's final learning rate (2e-3 peak x 0.1 floor), and it moved the weights
    rl_time = read_result(done["rl"].ref).train_runtime_s
    assert result["time_budget_s"] == pytest.approx(min(rl_time, bench.QUICK_BUDGET_S))
    cont = rows["continued_sft"]
    assert cont["families"] == ["code"] and cont["learning_rate"] == pytest.approx(2e-4)
    assert cont["steps"] >= 1 and cont["weight_change"] > 0
    before = weights(io.local_folder(done["sft"].ref, "model"))
    after = weights(work / "continued_sft" / "model")
    assert before.keys() == after.keys()
    assert any(not before[k].equal(after[k]) for k in before)  # type: ignore[attr-defined]
    # the run's own 2 held-out programming tasks are the first of the 4: checked against evaluate.after
    check = result["check_vs_evaluate_after"]
    assert check is not None and check["tasks"] == 2 and 0.0 <= check["agreement"] <= 1.0
    # --rl URI finds the same artifacts through the RL model's lineage (whatever code made them)
    located = bench.locate(config, store)
    by_lineage = bench.locate(config, store, rl_uri=done["rl"].ref.uri)
    assert {k: r.uri for k, r in by_lineage.refs.items()} == {k: done[k].ref.uri for k in bench.NEEDED}
    assert by_lineage.sft == located.sft and located.sft.families == ("math", "code", "mhqa")
    train = set(io.read_table(done["synthetic"].ref, "train").column("question").to_pylist())
    fresh = bench.heldout_tasks(located, "code", 4)
    assert fresh.num_rows == 4 and not train & set(fresh.column("question").to_pylist())


def test_final_learning_rate_follows_the_sft_schedule() -> None:
    from coa.train.config import SFTStageConfig

    bench = load_bench()
    cosine = SFTStageConfig(max_steps=1, learning_rate=2e-3, lr_scheduler="cosine", min_lr_ratio=0.1)
    assert bench.final_learning_rate(cosine) == pytest.approx(2e-4)
    assert bench.final_learning_rate(cosine.model_copy(update={"min_lr_ratio": 0.0})) == pytest.approx(2e-4)
    assert bench.final_learning_rate(cosine.model_copy(update={"lr_scheduler": "constant"})) == 2e-3


ROUND_OVERRIDES = [
    *OVERRIDES[:3],
    *TINY_TRAINING,
    "rl=null",
    "rounds=2",
    "round_sft={max_steps: 2}",
    "sampling={families: [code], samples: 2, max_turns: 2, max_new_tokens: 8, max_total_tokens: 2048}",
]
ROUND_BUILT = ("synthetic", "collect", "curate", "convert", "student", "sft", "evaluate.after",
               "sample.r1", "curate.r2", "convert.r2", "sft.r2")  # fmt: skip


@pytest.mark.sandbox  # the programming tasks are scored by running the model's program
def test_round_two_against_continued_sft_for_the_rounds_sampling_and_training_time(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.train.step import read_result

    monkeypatch.chdir(REPO)
    bench = load_bench()
    config = load_pipeline_config("configs/demo.yaml", ROUND_OVERRIDES)
    with pytest.raises(UserError, match="no `rl` section"):
        bench.locate(config, io.Store())  # the default candidate is RL, which this run has not
    with pytest.raises(UserError, match="rounds: 2"):
        bench.locate(load_pipeline_config("configs/demo.yaml", OVERRIDES), io.Store(), candidate="sft.r2")
    store, done = build(config, ROUND_BUILT)

    argv = [*ROUND_OVERRIDES, "--candidate", "sft.r2", "--quick", "--heldout", "4", "--also", "math,code"]
    result = run_bench("bench_rl_vs_sft", argv)["figures"]["result"]

    assert (result["candidate"], result["family"], result["heldout"]) == ("sft.r2", "code", 4)
    rows = {r["model"]: r for r in result["models"]}
    assert list(rows) == ["sft", "sft.r2", "continued_sft"]
    d = rows["sft.r2"]["delta_accuracy"]
    assert d["pairs"] == 4 and d["delta"] == pytest.approx(
        rows["sft.r2"]["accuracy"] - rows["sft"]["accuracy"]
    )
    # the round's cost: its sampling, curation and conversion builds plus its training time
    cost = result["candidate_cost_s"]
    assert set(cost) == {"sample.r1", "curate.r2", "convert.r2", "sft.r2", "total"}
    assert cost["sft.r2"] == pytest.approx(read_result(done["sft.r2"].ref).train_runtime_s)
    assert cost["sample.r1"] > 0 and cost["total"] == pytest.approx(
        sum(v for k, v in cost.items() if k != "total")
    )
    assert result["time_budget_s"] == pytest.approx(min(cost["total"], bench.QUICK_BUDGET_S))
    assert rows["sft.r2"]["steps"] == 2 and rows["sft.r2"]["uri"] == done["sft.r2"].ref.uri
    assert rows["continued_sft"]["families"] == ["code"] and rows["continued_sft"]["steps"] >= 1
    # where the points come from: the 4 tasks by kind, each model's correct counts, the round's samples
    kinds = result["by_kind"]
    assert sum(k["tasks"] for k in kinds) == 4 and all(k["kind"] != "?" for k in kinds)
    for name, row in rows.items():
        assert sum(k["correct"][name] for k in kinds) == round(row["accuracy"] * 4)
    sampled = (
        io.read_table(done["sample.r1"].ref, "rollouts", columns=["correct"]).column("correct").to_pylist()
    )
    assert sum(k["samples"]["n"] for k in kinds if "samples" in k) == len(sampled)
    assert sum(k["samples"]["correct"] for k in kinds if "samples" in k) == sum(sampled)
    # --also: the same three models on 4 held-out math tasks (the target family itself not repeated)
    assert list(result["also"]) == ["math"]
    math_rows = {r["model"]: r for r in result["also"]["math"]}
    assert list(math_rows) == list(rows) and "delta_accuracy" not in math_rows["sft"]
    for name in ("sft.r2", "continued_sft"):
        d = math_rows[name]["delta_accuracy"]
        assert d["pairs"] == 4 and d["delta"] == pytest.approx(
            math_rows[name]["accuracy"] - math_rows["sft"]["accuracy"]
        )
    printed = bench.format_also(result).splitlines()
    assert [line.split()[:3] for line in printed[2:]] == [["math", m, "4"] for m in rows]


def test_by_kind_counts_each_models_correct_tasks_and_the_rounds_samples_per_kind() -> None:
    import pyarrow as pa

    bench = load_bench()

    def meta(spec: str) -> str:
        return json.dumps({"structure": {"spec": spec, "params": {}}, "template": spec})

    tasks = pa.table(
        {"task_id": ["a", "b", "c"], "metadata": [meta("fizzbuzz"), meta("fizzbuzz"), meta("rle")]}
    )
    evals = {
        "sft": pa.table({"task_id": ["a", "b", "c"], "correct": [False, False, True]}),
        "sft.r2": pa.table({"task_id": ["a", "b", "c"], "correct": [True, True, False]}),
    }
    samples = pa.table(
        {
            "task_id": ["x", "x", "y"],
            "correct": [True, False, True],
            "metadata": [meta("fizzbuzz")] * 2 + ["{}"],
        }
    )
    rows = bench.by_kind(tasks, evals, samples)
    assert [(r["kind"], r["tasks"], r["correct"]) for r in rows] == [
        ("fizzbuzz", 2, {"sft": 0, "sft.r2": 2}),
        ("rle", 1, {"sft": 1, "sft.r2": 0}),
        ("?", 0, {"sft": 0, "sft.r2": 0}),  # a sampled kind with no held-out task
    ]
    assert rows[0]["samples"] == {"correct": 1, "n": 2} and "samples" not in rows[1]
    table = bench.format_kinds({"models": [{"model": "sft"}, {"model": "sft.r2"}], "by_kind": rows})
    assert table.splitlines()[2].split() == ["fizzbuzz", "2", "0", "2", "1/2"]
