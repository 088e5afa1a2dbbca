"""Curate + convert on storage over real and broken runs; the AFM and HF exports load back."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.convert import step as convert_step
from coa.convert.config import ConvertConfig
from coa.curate import step as curate_step
from coa.curate.config import CurateConfig
from coa.steps import StepCheckFailed, TableInput, run_step

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "afm"
runner = CliRunner()


def _artifact(
    store: io.Store, kind: str, table_name: str, table: Any, contract: schemas.Contract
) -> io.ArtifactRef:
    writer = store.writer(kind, "t", {"rows": table.num_rows, "kind": kind})
    writer.write_table(table_name, table, contract)
    return writer.commit()


@pytest.fixture
def converted(teacher_runs: list[dict[str, Any]], synthetic_tasks: dict[str, Any]) -> dict[str, Any]:
    store = io.Store()
    runs = copy.deepcopy(teacher_runs)
    broken_plan = copy.deepcopy(next(r for r in runs if r["family"] == "math" and r["final_answer"]))
    broken_plan["run_id"] += "-noplan"
    broken_plan["steps"] = [s for s in broken_plan["steps"] if s["role"] != "plan"]
    broken_plan["n_steps"] = len(broken_plan["steps"])
    crashed = copy.deepcopy(runs[0])
    crashed.update(
        run_id=crashed["run_id"] + "-crash", status="error", error="ToolError: boom", final_answer=None
    )
    wrong = copy.deepcopy(next(r for r in runs if r["family"] == "math" and r["final_answer"]))
    wrong.update(run_id=wrong["run_id"] + "-wrong", final_answer="-1")
    all_runs = [*runs, broken_plan, crashed, wrong]
    raw = _artifact(
        store, "trajectories", "trajectories", schemas.TRAJECTORY.from_rows(all_runs), schemas.TRAJECTORY
    )
    tasks = _artifact(store, "tasks", "train", synthetic_tasks["train"], schemas.TASK)
    curate_cfg = CurateConfig(
        dedup={"near": False}, filters={"max_repeated_calls": 10}, gate={"correctness_floor": 0.3}
    )  # type: ignore[arg-type]
    train = TableInput(tasks, "train")
    curated = run_step(curate_step.step(curate_cfg, TableInput(raw, "trajectories"), train), store)
    out = run_step(convert_step.step(ConvertConfig(), TableInput(curated.ref, "trajectories"), train), store)
    return {
        "raw": raw,
        "curated": curated.ref,
        "result": curated.summary,
        "out": out.ref,
        "counts": out.summary,
        "n": len(all_runs),
    }


def test_curate_and_convert_lose_nothing(converted: dict[str, Any]) -> None:
    curated = converted["curated"]
    assert curated.rows("trajectories") + curated.rows("quarantine") == converted["n"]
    quarantine = io.read_table(curated, "quarantine").to_pylist()
    reasons = {q["row_key"]: q["reason"] for q in quarantine}
    assert any(k.endswith("-noplan") and v == "invalid_coa" for k, v in reasons.items())
    assert any(k.endswith("-crash") and v.startswith("unclean_end") for k, v in reasons.items())
    assert any(k.endswith("-wrong") and v == "incorrect" for k, v in reasons.items())
    code_runs = [r for r in io.read_table(curated, "trajectories").to_pylist() if r["family"] == "code"]
    assert code_runs and all(r["correct"] for r in code_runs)  # tests really ran in the sandbox
    stats = io.read_table(curated, "task_stats").to_pylist()
    assert sum(s["runs"] for s in stats) == converted["n"]
    assert [s["task_id"] for s in stats] == sorted(
        {r["task_id"] for r in io.read_table(converted["raw"]).to_pylist()}
    )
    out = converted["out"]
    sft = io.read_table(out, "sft").to_pylist()
    assert len(sft) + sum(
        1 for q in io.read_table(out, "quarantine").to_pylist() if q["stage"] == "convert"
    ) == (curated.rows("trajectories"))
    for example in sft:
        content = example["messages"][-1]["content"]
        assert [m["role"] for m in example["messages"]] == ["system", "user", "assistant"]
        for span in example["observation_spans"]:
            piece = content[span["start"] : span["end"]]
            assert piece.startswith("<observation>") and piece.rstrip("\n").endswith("</observation>")
        assert example["n_tokens"] > 100
    rl = io.read_table(out, "rl_prompts").to_pylist()
    assert len({r["group_index"] for r in rl}) == len(rl) == 20
    assert all(0 <= r["teacher_pass_rate"] <= 1 for r in rl)


def test_an_old_curate_artifacts_task_stats_json_gives_the_same_pass_rates(converted: dict[str, Any]) -> None:
    """Curate artifacts from before ``task_stats.v1`` hold ``task_stats.json``; convert reads either."""
    store = io.Store()
    curated = converted["curated"]
    stats = io.read_table(curated, "task_stats").to_pylist()
    writer = store.writer("curated", "old", {"format": "task_stats.json"})
    writer.write_table("trajectories", io.read_table(curated, "trajectories"), schemas.TRAJECTORY)
    writer.write_file("task_stats.json", json.dumps({s["task_id"]: [s["runs"], s["correct"]] for s in stats}))
    old = writer.commit()
    assert "task_stats" not in old.tables
    assert convert_step.teacher_stats(old).equals(convert_step.teacher_stats(curated))
    tasks = io.read_table(curated, "trajectories").select(["task_id"])
    by_batch = convert_step.stats_of(convert_step.teacher_stats(old), tasks)
    assert by_batch and all(
        by_batch[s["task_id"]] == (s["runs"], s["correct"]) for s in stats if s["task_id"] in by_batch
    )


def test_pass_rate_band_selects_rl_prompts(converted: dict[str, Any]) -> None:
    store = io.Store()
    tasks = io.open_artifact(io.read_lineage(converted["out"])["upstream"][1]["uri"])
    curated = TableInput(converted["curated"], "trajectories")
    hard = run_step(
        convert_step.step(ConvertConfig(max_pass_rate=0.5), curated, TableInput(tasks, "train")), store
    ).ref
    rates = [r["teacher_pass_rate"] for r in io.read_table(hard, "rl_prompts").to_pylist()]
    assert all(r <= 0.5 for r in rates)
    rejected = [q for q in io.read_table(hard, "quarantine").to_pylist() if q["reason"] == "pass_rate_band"]
    assert len(rates) + len(rejected) == 20


def test_exports_load_back(converted: dict[str, Any], tmp_path: Path) -> None:
    uri = converted["out"].uri
    sft_json = tmp_path / "sft.json"
    assert runner.invoke(app, ["export", uri, str(sft_json), "--format", "afm-sft"]).exit_code == 0
    records = json.loads(sft_json.read_text())
    assert records and set(records[0]) == {"instruction", "input", "output"}
    with_obs = [r for r in records if "<observation>" in r["output"]]
    assert with_obs and all("</observation>\n\n" in r["output"] for r in with_obs)
    assert json.loads((tmp_path / "dataset_info.json").read_text())["sft"]["file_name"] == "sft.json"

    rl_path = tmp_path / "rl.parquet"
    result = runner.invoke(app, ["export", uri, str(rl_path), "--format", "afm-rl"])
    assert result.exit_code == 0 and "rl.code_math.afm.parquet" in result.output, result.output
    names = pq.read_schema(FIXTURES / "aime24.parquet").names
    tables = [pq.read_table(tmp_path / f"rl.{group}.parquet") for group in ("code_math.afm", "web.batch")]
    assert not rl_path.exists() and all(t.column_names == names for t in tables)
    indices = [row["index"] for t in tables for row in t.column("extra_info").to_pylist()]
    assert len(set(indices)) == len(indices) == converted["out"].rows("rl_prompts")

    hf = tmp_path / "hf"
    assert runner.invoke(app, ["export", uri, str(hf), "--format", "hf"]).exit_code == 0
    cache = str(tmp_path / "cache")  # datasets caches a local folder by its name, not its path
    ds = datasets.load_dataset(str(hf), cache_dir=cache)
    assert ds["train"].num_rows == converted["out"].rows("sft")
    assert ds["train"][0]["messages"][-1]["role"] == "assistant"
    rl_ds = datasets.load_dataset(str(hf), "rl", cache_dir=cache)
    assert rl_ds["train"].num_rows == converted["out"].rows("rl_prompts")
    on_disk = datasets.load_from_disk(str(hf))  # the save_to_disk layout beside the Parquet configs
    assert set(on_disk) == {"sft", "rl"} and on_disk["rl"].num_rows == rl_ds["train"].num_rows
    assert on_disk["sft"].num_rows == ds["train"].num_rows
    assert on_disk["sft"][0]["messages"] == ds["train"][0]["messages"]
    assert "{% generation %}" in (hf / "chat_template.jinja").read_text()


def test_failed_gate_fails_with_the_report_and_stays_failed(
    teacher_runs: list[dict[str, Any]], synthetic_tasks: dict[str, Any]
) -> None:
    store = io.Store()
    wrong = [{**r, "final_answer": "0"} for r in copy.deepcopy(teacher_runs) if r["family"] == "math"]
    raw = _artifact(
        store, "trajectories", "trajectories", schemas.TRAJECTORY.from_rows(wrong), schemas.TRAJECTORY
    )
    tasks = _artifact(store, "tasks", "train", synthetic_tasks["train"], schemas.TASK)
    config = CurateConfig(gate={"correctness_floor": 0.5}, filters={"require_correct": False})  # type: ignore[arg-type]
    step = curate_step.step(config, TableInput(raw, "trajectories"), TableInput(tasks, "train"))
    with pytest.raises(StepCheckFailed, match="correctness_floor") as failed:
        run_step(step, store)
    committed = io.open_artifact(failed.value.uri)
    assert "report.html" in committed.files  # the report can be read, at its committed address
    assert failed.value.message.endswith(f"see the report {committed.uri}/report.html")
    with pytest.raises(StepCheckFailed) as again:  # a rerun does not reuse it silently
        run_step(step, store)
    assert str(again.value) == str(failed.value)  # the same failure reads the same
    assert again.value.exit_code == 1
