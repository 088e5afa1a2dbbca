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
