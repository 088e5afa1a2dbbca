"""The `coa` command line: help everywhere, validate/show reports, clear errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from coa import io
from coa.cli import app
from coa.io import Store
from tests import storage_cases as cases

runner = CliRunner()


@pytest.mark.parametrize("args", [[], ["run"], ["tasks"], ["tasks", "import"], ["validate"], ["show"]])
def test_help_everywhere(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_validate_ok_and_show(tmp_path: Path) -> None:
    ref = cases.write_tasks(Store(), {"a": 1})
    result = runner.invoke(app, ["validate", ref.uri])
    assert result.exit_code == 0, result.output
    assert "task.v1, 3 rows" in result.output and "valid" in result.output
    shown = runner.invoke(app, ["show", ref.uri, "--rows", "1"])
    assert shown.exit_code == 0, shown.output
    assert "content_hash" in shown.output and "s:0" in shown.output and "gold_answers" in shown.output


def test_validate_reports_violation_per_column(tmp_path: Path) -> None:
    ref = cases.write_tasks(Store(), {"a": 1})
    bad = cases.tasks_table().drop_columns(["family"])
    pq.write_table(bad, Path(ref.uri) / "tasks.parquet")
    result = runner.invoke(app, ["validate", ref.uri])
    assert result.exit_code == 1
    assert "family" in result.output and "missing" in result.output
    assert "corrupt" in result.output  # the file no longer matches the manifest's sha256
    assert "contract violation" in result.output


def test_validate_loose_parquet_file_uses_declared_schema(tmp_path: Path) -> None:
    path = tmp_path / "tasks.parquet"
    pq.write_table(cases.tasks_table(), path)
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0
    assert runner.invoke(app, ["validate", str(path), "--schema", "eval.v1"]).exit_code == 1


def test_validate_uncommitted_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "tasks.parquet").write_bytes(b"partial")
    result = runner.invoke(app, ["validate", str(tmp_path / "half")])
    assert result.exit_code == 2 and "not a committed artifact" in result.output


def test_run_with_config_typo_fails_before_prefect(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--config", "configs/demo.yaml", "tasks.nmae=x"])
    assert result.exit_code == 2
    assert "tasks.nmae: unknown key (did you mean 'name'?)" in result.output


def test_show_prints_lineage_json(tmp_path: Path) -> None:
    ref = cases.write_tasks(Store(), {"a": 1})
    lineage = io.read_lineage(ref)
    result = runner.invoke(app, ["show", ref.uri])
    assert lineage["code_version"] in result.output
    assert json.loads(json.dumps(lineage))["kind"] == "tasks"


def test_tasks_import_every_afm_fixture(afm_fixtures: Path, tmp_path: Path) -> None:
    files = sorted(str(p) for p in afm_fixtures.iterdir())
    out = tmp_path / "bench"
    result = runner.invoke(app, ["tasks", "import", *files, "--out", str(out)])
    assert result.exit_code == 0, result.output
    tasks = io.read_table(str(out), "tasks")
    assert tasks.num_rows == 103 + 680 + 500 + 30 + 500 + 167
    counts = tasks.group_by("family").aggregate([("task_id", "count")]).to_pylist()
    assert {c["family"]: c["task_id_count"] for c in counts} == {
        "web": 783,
        "mhqa": 500,
        "math": 530,
        "code": 167,
    }
    assert len(set(tasks.column("task_id").to_pylist())) == tasks.num_rows
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0
    again = runner.invoke(app, ["tasks", "import", *files, "--out", str(out)])
    assert again.exit_code == 0 and "up to date" in again.output


def test_tasks_import_unreadable_input_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    out = tmp_path / "out"
    result = runner.invoke(app, ["tasks", "import", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert str(bad) in result.output
    assert io.lookup(str(out)) is None
    missing = runner.invoke(app, ["tasks", "import", str(tmp_path / "nope.jsonl"), "--out", str(out)])
    assert missing.exit_code == 2 and "input not found" in missing.output


def test_tasks_import_refuses_to_replace_other_inputs_without_force(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"question": "1+1?", "answer": "2"}\n')
    out = tmp_path / "out"
    assert (
        runner.invoke(app, ["tasks", "import", str(a), "--family", "math", "--out", str(out)]).exit_code == 0
    )
    a.write_text('{"question": "2+2?", "answer": "4"}\n')
    refused = runner.invoke(app, ["tasks", "import", str(a), "--family", "math", "--out", str(out)])
    assert refused.exit_code == 2 and "--force" in refused.output
    assert io.read_table(str(out)).column("question").to_pylist() == ["1+1?"]  # committed data untouched
    forced = runner.invoke(app, ["tasks", "import", str(a), "--family", "math", "--out", str(out), "--force"])
    assert forced.exit_code == 0 and io.read_table(str(out)).column("question").to_pylist() == ["2+2?"]


def test_format_check_reports_each_row_and_exit_code(tmp_path: Path) -> None:
    from coa.format import Trajectory, render

    good = render(
        Trajectory.of(
            [
                ("plan", "1. compute"),
                ("think", "use code"),
                ("code", "```python\nprint(2+2)\n```"),
                ("observation", "4"),
                ("reflection", "the result is 4"),
                ("think", "done"),
                ("answer", "\\boxed{4}"),
            ]
        )
    )
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"id": "good", "text": good})
        + "\n"
        + json.dumps({"id": "bad", "text": "<answer>\n4\n</answer>\n"})
        + "\n"
    )
    result = runner.invoke(app, ["format", "check", "--variant", "code_math", str(path)])
    lines = [json.loads(line) for line in result.output.strip().splitlines()]
    assert [(r["id"], r["ok"]) for r in lines] == [("good", True), ("bad", False)]
    assert lines[1]["error"]["rule"]
    assert result.exit_code == 1
    only_good = tmp_path / "good.jsonl"
    only_good.write_text(json.dumps({"id": "good", "text": good}) + "\n")
    assert runner.invoke(app, ["format", "check", "--variant", "code_math", str(only_good)]).exit_code == 0
    unknown = runner.invoke(app, ["format", "check", "--variant", "poetry", str(only_good)])
    assert unknown.exit_code == 2
