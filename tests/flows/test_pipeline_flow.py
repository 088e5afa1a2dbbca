"""The pipeline flow in process (ephemeral Prefect): stages run, artifacts published, reruns reuse."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from coa import io

REPO = Path(__file__).resolve().parents[2]
TINY_TRAINING = [
    "student.tiny={vocab_size: 400, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 2, "
    "intermediate_size: 64}",
    "sft.time_budget_s=null",
    "sft.max_steps=4",
    "sft.save_steps=2",
    "sft.logging_steps=1",
    "rl.families=null",
    "rl.time_budget_s=null",
    "rl.max_steps=2",
    "rl.save_steps=2",
    "rl.prompts_per_step=2",
    "rl.group_size=2",
    "rl.max_turns=2",
    "rl.max_new_tokens=8",
    "rl.max_total_tokens=16",
    "rl.overlong_buffer=8",
    "rl.entropy_floor=null",
    "evaluate.max_turns=2",
    "evaluate.max_new_tokens=8",
    "evaluate.max_total_tokens=16",
    "rounds=1",  # the demo's round trains round_sft's 1,000 steps: tests that want a round name it
]
SMALL = [
    "synthetic.train={arithmetic: 6, multihop: 6, programming: 3}",
    "synthetic.heldout={arithmetic: 2, multihop: 2, programming: 1}",
    "curate.gate.correctness_floor=0.3",
    *TINY_TRAINING,
]


@pytest.fixture(scope="module")
def prefect_harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_pipeline_runs_built_stages_and_reports_the_rest(
    prefect_harness: None, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.plan.pipeline import NOT_BUILT
    from flows.pipeline import pipeline

    monkeypatch.chdir(REPO)
    result = pipeline(config_path="configs/demo.yaml", overrides=SMALL)
    refs = result.refs
    stages = {s.stage: s for s in result.stages}
    assert stages["synthetic"].rows == 15 and stages["collect"].rows == 15
    assert stages["curate"].rows + stages["curate.quarantine"].rows == 15
    assert stages["convert"].rows + stages["convert.quarantine"].rows >= stages["curate"].rows
    assert all(stages[name].status.startswith("not built yet") for name in NOT_BUILT)
    assert all(s.status == "built" for s in result.stages if s.artifact)
    curated = io.open_artifact(refs["curate"].uri)
    assert result.report == f"{curated.uri}/report.html"
    assert {"report.html", "summary.json"} <= set(curated.files) and "task_stats" in curated.tables
    assert any(f.startswith("data_docs/") for f in curated.files)
    lineage = io.read_lineage(refs["convert"].uri)
    assert [u["kind"] for u in lineage["upstream"]] == ["curated", "tasks"]
    assert lineage["step"] == "convert" and set(lineage["inputs"]) == {"curated", "tasks"}
    sft = io.open_artifact(refs["sft"].uri)
    assert io.read_lineage(sft)["steps_run"] == 4 and "model/config.json" in sft.files
    assert stages["evaluate.before"].rows == stages["evaluate.after"].rows == 5
    assert stages["evaluate.after_rl"].rows == 5 and io.read_lineage(refs["rl"].uri)["steps_run"] == 2
    assert stages["collect.heldout"].rows == 5
    assert Path(result.training_report or "").is_file()
    page = Path(result.training_report or "").read_text()
    assert "steps/min on " in page and " threads" in page  # SFT's speed, beside the CPU it ran on
    families = [row["family"] for row in result.comparison]
    assert families[-1] == "all" and set(families) == {"math", "mhqa", "code", "all"}
    assert all(
        0 <= row["accuracy_after"] <= 1
        and 0 <= row["accuracy_after_rl"] <= 1
        and row["teacher_tokens_per_task"] > 0
        for row in result.comparison
    )
    # every step that holds episodes committed its viewer page; the training report's pairs the last
    # evaluation with the teacher's held-out runs (coa.view.commit)
    from coa.view.commit import LINEAGE_KEY, PAGE_FILE

    pages = {
        name: io.read_lineage(ref.uri)[LINEAGE_KEY]
        for name, ref in refs.items()
        if PAGE_FILE in io.open_artifact(ref.uri).files
    }
    assert {"collect", "curate", "convert", "rl", "evaluate.before", "evaluate.after_rl", "report"} <= set(
        pages
    )
    assert pages["curate"]["total"] == 15 and pages["evaluate.after_rl"]["shown"] == 5
    assert pages["report"]["teacher"] == refs["collect.heldout"].uri and pages["report"]["shown"] == 5
    assert "synthetic" not in pages and "sft" not in pages  # tasks and models are not episodes
    text = (Path(io.filesystem(refs["rl"].uri)[1]) / PAGE_FILE).read_text()
    embedded = text.split('id="coa-data">', 1)[1].split("</script>", 1)[0].replace("<\\/", "</")
    rollouts = json.loads(embedded)["episodes"]  # each with its question, from the RL step's prompts
    assert len(rollouts) == pages["rl"]["total"] > 0 and all(e["q"] for e in rollouts)
    cost = sum(p["seconds"] for p in pages.values()), sum(p["bytes"] for p in pages.values()) / 1e6
    print(f"\n{len(pages)} episodes pages: {cost[0]:.2f} s, {cost[1]:.1f} MB")

    again = pipeline(config_path="configs/demo.yaml", overrides=SMALL)
    assert again.refs == refs  # same inputs: the same artifacts
    assert all(s.status == "reused" for s in again.stages if s.artifact)  # every step reused
    assert (
        io.read_lineage(refs["collect"].uri)["created_at"]
        == io.read_lineage(again.refs["collect"].uri)["created_at"]
    )


def test_import_only_profile(
    prefect_harness: None, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.pipeline import pipeline

    monkeypatch.chdir(REPO)
    result = pipeline(
        config_path="configs/base.yaml",
        overrides=["tasks.sources=[{path: configs/data/sample_tasks.jsonl, family: math, limit: 5}]"],
    )
    stages = {s.stage: s for s in result.stages}
    assert stages["tasks"].rows == 5 and stages["collect"].status == "not configured"
    # the CLI runs the same step: the same artifact for the same input, reused
    from typer.testing import CliRunner

    from coa.cli import app

    cli = CliRunner().invoke(
        app, ["tasks", "import", "configs/data/sample_tasks.jsonl", "--family", "math", "--limit", "5"]
    )
    assert cli.exit_code == 0, cli.output
    assert cli.stdout.strip().splitlines()[-1] == result.refs["tasks"].uri
    assert "reused committed artifact" in cli.output


def test_failed_gate_fails_the_run_with_the_same_reason_twice(
    prefect_harness: None, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.pipeline import pipeline

    monkeypatch.chdir(REPO)
    impossible = [*SMALL[:2], "curate.gate.correctness_floor=1.0", "curate.filters.require_correct=false"]
    impossible.append("collect.offline.slip_rate=0.5")  # the teacher slips: accuracy < 1
    first = pipeline(config_path="configs/demo.yaml", overrides=impossible, return_state=True)
    second = pipeline(config_path="configs/demo.yaml", overrides=impossible, return_state=True)
    assert first.is_failed() and second.is_failed()
    assert first.message.startswith("curate: check failed: curation gate failed")
    assert first.message == second.message
