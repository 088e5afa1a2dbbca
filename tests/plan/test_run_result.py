"""The typed result of a run (:mod:`coa.plan.run_result`) and ``coa run`` reading it by field.

No step is built: the plan is the demo's, the finished steps are hand-made results, and ``coa run``
is given the flow's state, so this checks the reading (rows, statuses, the reports' paths and the
training report's comparison), not the stages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coa.io import ArtifactRef, TableInfo
from coa.plan import load_pipeline_config, plan
from coa.plan.run_result import RunResult, run_result
from coa.resources import BuildResources
from coa.steps import StepResult

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"
COMPARISON = {
    "family": "all",
    "tasks": 5,
    "format_valid_before": 0.0,
    "format_valid_after": 1.0,
    "accuracy_before": 0.0,
    "accuracy_after": 0.6,
    "student_tokens_per_task": 200.0,
    "teacher_accuracy": 1.0,
    "teacher_tokens_per_task": 2000.0,
}

DELTA = {
    "benchmark": "all",
    "metric": "correct",
    "pairs": 5,
    "candidate": 0.6,
    "baseline": 0.0,
    "delta": 0.6,
    "low": 0.2,
    "high": 1.0,
    "confidence": 0.95,
}
CHANGE = {"step": "SFT", "against": "before SFT", "deltas": {"all": DELTA}}


def _ref(kind: str, tables: dict[str, int], primary: str | None = None) -> ArtifactRef:
    return ArtifactRef(
        uri=f"file:///store/{kind}/x-1",
        kind=kind,
        name="x",
        key="1",
        content_hash="h",
        tables={t: TableInfo(schema_id="s", rows=n, files=()) for t, n in tables.items()},
        primary=primary,
    )


def _done() -> dict[str, StepResult]:
    return {
        "synthetic": StepResult(
            "synthetic",
            _ref("tasks", {"train": 12, "heldout": 5}, "train"),
            False,
            {},
            BuildResources(75.4, 512.0),
        ),
        "collect": StepResult("collect", _ref("trajectories", {"trajectories": 12}), True, {}),
        "curate": StepResult(
            "curate",
            _ref("curated", {"trajectories": 9, "quarantine": 3}, "trajectories"),
            False,
            {
                "rows_in": 12,
                "rows_kept": 9,
                "rows_quarantined": 3,
                "report": "file:///store/curated/x-1/report.html",
            },
        ),
        "report": StepResult(
            "report",
            _ref("report", {}),
            False,
            {"report": "/tmp/training_report.html", "comparison": [COMPARISON], "changes": [CHANGE]},
        ),
    }


def test_the_result_of_a_run_is_read_from_the_steps_and_their_typed_summaries() -> None:
    cfg = load_pipeline_config(DEMO, [])
    steps = plan(cfg)
    result = run_result(cfg, steps, _done())
    by = {row.stage: row for row in result.stages}
    assert [r.stage for r in result.stages][:4] == ["synthetic", "synthetic.heldout", "collect", "curate"]
    assert (by["synthetic"].rows, by["synthetic.heldout"].rows, by["synthetic"].status) == (12, 5, "built")
    assert (by["collect"].status, by["curate.quarantine"].rows) == ("reused", 3)
    # what a build used, once per step (its first table's row); nothing for a reuse
    assert (by["synthetic"].wall_s, by["synthetic"].peak_rss_mib) == (75.4, 512.0)
    assert by["synthetic.heldout"].peak_rss_mib is None and by["collect"].wall_s is None
    assert by["report"].rows is None and by["report"].artifact == "file:///store/report/x-1"
    assert by["convert"].status == "not run" and by["convert"].artifact is None
    assert set(result.refs) == {"synthetic", "collect", "curate", "report"}
    assert result.refs["curate"].rows("quarantine") == 3
    assert result.report == "file:///store/curated/x-1/report.html"
    assert result.training_report == "/tmp/training_report.html"
    assert result.comparison == (COMPARISON,)
    (change,) = result.changes  # typed: the paired delta of each training step
    assert (change.step, change.against, change.deltas["all"].points()) == (
        "SFT",
        "before SFT",
        "+60.0 [+20.0, +100.0]",
    )
    # what the flow returns survives Prefect's result store and reads back equal
    assert RunResult.model_validate_json(result.model_dump_json()) == result


class _Done:
    """A finished flow run's state, as ``pipeline(..., return_state=True)`` gives it."""

    def __init__(self, result: RunResult) -> None:
        self._result, self.message = result, None

    def is_failed(self) -> bool:
        return False

    def result(self) -> RunResult:
        return self._result


def test_coa_run_prints_the_typed_result(monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.pipeline
    from coa.cli import app

    cfg = load_pipeline_config(DEMO, [])
    result = run_result(cfg, plan(cfg), _done())
    seen: dict[str, Any] = {}

    def pipeline(**kwargs: Any) -> _Done:
        seen.update(kwargs)
        return _Done(result)

    monkeypatch.setattr(flows.pipeline, "pipeline", pipeline)
    monkeypatch.chdir(REPO)
    out = CliRunner().invoke(app, ["run", "--config", "configs/demo.yaml"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert seen["config_path"] == "configs/demo.yaml" and seen["return_state"] is True
    assert "synthetic.heldout" in out.output and "not run" in out.output
    assert "peak RSS" in out.output and "0.50 GiB" in out.output and "1:15" in out.output
    assert "peak memory of the steps built: 512 MiB, in synthetic" in out.output
    assert "student on held-out tasks, before and after SFT" in out.output
    assert "what each step changed" in out.output and "+60.0 [+20.0, +100.0] *" in out.output
    assert "curation report: file:///store/curated/x-1/report.html" in out.output
    assert "training report: /tmp/training_report.html" in out.output


def test_coa_run_prints_each_built_sfts_speed_and_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.pipeline
    from coa import io
    from coa.cli import app
    from coa.train.config import SFTResult

    sft = SFTResult(
        model_dir="m", output_dir="o", steps_planned=5000, steps_run=5000, start_step=0, global_step=5000,
        final_loss=0.01, loss_curve=[], tokens_seen=8_255_166, session_tokens=8_255_166,
        trained_tokens=4_794_981, train_runtime_s=786.4, tokens_per_s=10_496.8, n_examples=4350,
        n_truncated=0, n_dropped=0, n_rows=5334, packing=False, bf16=False, device="cpu",
        device_name="Intel(R) Xeon(R) Processor, 2 threads", lora=False, loss_curve_png="l.png",
    )  # fmt: skip
    ref = _ref("model", {}).model_copy(
        update={"uri": "file:///store/model/sft-1", "files": ("sft_result.json",)}
    )
    done = _done() | {
        "sft": StepResult("sft", ref, False, {}),
        "sft.r2": StepResult("sft.r2", ref, True, {}),  # reused: not this run's speed
    }
    read: list[str] = []

    def read_file(r: ArtifactRef, name: str) -> str:
        read.append(name)
        return sft.model_dump_json()

    cfg = load_pipeline_config(DEMO, [])
    monkeypatch.setattr(flows.pipeline, "pipeline", lambda **kw: _Done(run_result(cfg, plan(cfg), done)))
    monkeypatch.setattr(io, "read_file", read_file)
    monkeypatch.chdir(REPO)
    out = CliRunner().invoke(app, ["run", "--config", "configs/demo.yaml"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert (
        "sft: 5,000 steps, 10,497 tokens/s, 381 steps/min on Intel(R) Xeon(R) Processor, 2 threads"
        in out.output
    )
    assert "sft.r2:" not in out.output and read == ["sft_result.json"]
