"""`coa evaluate` on imported benchmark fixtures: K samples per task, metrics that match the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coa import io
from coa.cli import app
from coa.evaluate.metrics import pass_at_k

from .test_stage import tiny_model  # noqa: F401 (fixture)

runner = CliRunner()


def test_evaluate_imported_aime_and_livecodebench_with_four_samples(
    tiny_model: Path,  # noqa: F811
    afm_fixtures: Path,
) -> None:
    files = [str(afm_fixtures / "aime24.parquet"), str(afm_fixtures / "livecodebench_v5.parquet")]
    imported = runner.invoke(app, ["tasks", "import", *files])
    assert imported.exit_code == 0, imported.output
    tasks_uri = imported.stdout.strip().splitlines()[-1].split()[-1]
    # imported math and code tasks bring no encyclopedia, so the evaluation's tools are code only
    limits = ["evaluate.max_turns=2", "evaluate.max_new_tokens=8", "evaluate.max_total_tokens=16",
              "evaluate.prompt_style=brief", "evaluate.batch_size=16",
              "tools.code.enabled=[code]", "evaluate.tools=code"]  # fmt: skip
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            str(tiny_model),
            "--tasks",
            tasks_uri,
            "--limit",
            "2",
            "--samples",
            "4",
            *limits,
        ],
    )
    assert result.exit_code == 0, result.output
    uri = next(line.split()[-1] for line in result.stdout.splitlines() if line.startswith("eval: "))
    rows = io.read_table(uri, "eval").to_pylist()
    benchmarks = {r["benchmark"] for r in rows}
    assert len(benchmarks) == 2 and {r["family"] for r in rows} == {"math", "code"}
    per_task: dict[str, list[bool]] = {}
    for r in rows:
        per_task.setdefault(r["task_id"], []).append(r["correct"])
    assert len(per_task) == 4 and all(len(v) == 4 for v in per_task.values())
    assert sorted(r["sample_index"] for r in rows if r["task_id"] == rows[0]["task_id"]) == [0, 1, 2, 3]
    assert all(0 < r["completion_tokens"] <= 16 and r["total_tokens"] > r["prompt_tokens"] for r in rows)
    document = json.loads(io.read_file(uri, "metrics.json"))
    for bench in benchmarks:
        m = document["benchmarks"][bench]
        tasks = {
            t: v
            for t, v in per_task.items()
            if any(r["task_id"] == t and r["benchmark"] == bench for r in rows)
        }
        assert m["tasks"] == 2 and m["samples"] == 4 and m["runs"] == 8
        assert m["pass@1"] == pytest.approx(sum(sum(v) for v in tasks.values()) / 8)
        for k in (2, 4):
            assert m[f"pass@{k}"] == pytest.approx(sum(pass_at_k(4, sum(v), k) for v in tasks.values()) / 2)
    assert "maj@4" in document["families"]["math"] and "maj@4" not in document["families"]["code"]
    assert "pass@1 ± se" in result.stdout and "benchmark" in result.stdout
