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


def test_show_a_damaged_artifact_fails_with_one_clear_line(tmp_path: Path) -> None:
    """A truncated table is not "0 rows" and a success: exit 1, the damage named, no traceback."""
    ref = cases.write_tasks(Store(), {"a": 1})
    table = Path(ref.uri) / "tasks.parquet"
    table.write_bytes(table.read_bytes()[:40])
    result = runner.invoke(app, ["show", ref.uri])
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())
    assert "is damaged: tasks: tasks.parquet" in message and "coa validate" in message
    assert "Traceback" not in result.output


def _uri(output: str) -> str:
    """The artifact URI a stage command prints on its last line."""
    return output.strip().splitlines()[-1].split()[-1]


def test_tasks_import_every_afm_fixture(afm_fixtures: Path) -> None:
    files = sorted(str(p) for p in afm_fixtures.iterdir())
    result = runner.invoke(app, ["tasks", "import", *files])
    assert result.exit_code == 0, result.output
    uri = _uri(result.stdout)
    tasks = io.read_table(uri, "tasks")
    assert tasks.num_rows == 103 + 680 + 500 + 30 + 500 + 167
    counts = tasks.group_by("family").aggregate([("task_id", "count")]).to_pylist()
    assert {c["family"]: c["task_id_count"] for c in counts} == {
        "web": 783,
        "mhqa": 500,
        "math": 530,
        "code": 167,
    }
    assert len(set(tasks.column("task_id").to_pylist())) == tasks.num_rows
    assert runner.invoke(app, ["validate", uri]).exit_code == 0
    again = runner.invoke(app, ["tasks", "import", *files])
    assert again.exit_code == 0 and "reused committed artifact" in again.output and _uri(again.stdout) == uri


def test_tasks_import_unreadable_input_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, storage_root: Path
) -> None:
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    result = runner.invoke(app, ["tasks", "import", str(bad)])
    assert result.exit_code == 2
    assert str(bad) in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1  # one error line
    assert not list(storage_root.rglob("_COMMITTED"))
    missing = runner.invoke(app, ["tasks", "import", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "input not found" in missing.output


def test_tasks_import_of_changed_inputs_is_a_new_artifact(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"question": "1+1?", "answer": "2"}\n')
    first = runner.invoke(app, ["tasks", "import", str(a), "--family", "math"])
    assert first.exit_code == 0
    a.write_text('{"question": "2+2?", "answer": "4"}\n')
    second = runner.invoke(app, ["tasks", "import", str(a), "--family", "math"])
    assert second.exit_code == 0 and _uri(second.stdout) != _uri(first.stdout)
    assert io.read_table(_uri(first.stdout)).column("question").to_pylist() == ["1+1?"]  # untouched
    assert io.read_table(_uri(second.stdout)).column("question").to_pylist() == ["2+2?"]


def test_wrong_table_and_missing_artifact_are_one_line_errors_with_a_hint(tmp_path: Path) -> None:
    tasks = cases.write_tasks(Store(), {"a": 1})
    wrong = runner.invoke(app, ["collect", "--tasks", tasks.uri, "--table", "nope"])
    assert wrong.exit_code == 2 and "has no table 'nope'" in wrong.output and "Traceback" not in wrong.output
    missing = runner.invoke(app, ["curate", "--raw", str(tmp_path / "missing"), "--tasks", tasks.uri])
    assert missing.exit_code == 2 and "coa collect" in missing.output and "Traceback" not in missing.output


def test_format_check_reports_each_row_and_exit_code(tmp_path: Path) -> None:
    from coa.format import Trajectory, render

    good = render(
        Trajectory.of(
            [
                ("plan", "1. compute"),
                ("think", "use code"),
                ("code", "```py\nprint(2+2)\n```"),
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


def test_a_hub_model_with_no_network_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import time

    from huggingface_hub import constants

    from coa._cli.common import _model_input
    from coa.errors import InfraError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.monotonic()
    with pytest.raises(
        InfraError, match=r"model someorg/somemodel: not in the local Hugging Face cache"
    ) as e:
        _model_input("someorg/somemodel")
    assert (
        time.monotonic() - t0 < 5
        and e.value.exit_code == 3
        and "hf download someorg/somemodel" in str(e.value)
    )


def test_the_progress_bar_shows_the_live_figures_the_prefect_progress_shows() -> None:
    import io as stdio

    from rich.console import Console
    from rich.progress import Progress, TextColumn

    from coa._cli.common import BarProgress
    from coa.progress import LiveMetrics, figures_text

    out = stdio.StringIO()
    with Progress(TextColumn("{task.completed}/{task.total} {task.fields[figures]}"),
                  console=Console(file=out, width=200, force_terminal=False)) as bar:  # fmt: skip
        live = BarProgress(bar, bar.add_task("sft", total=None, figures=""))
        assert isinstance(live, LiveMetrics)  # what the trainers' callback checks before sending figures
        live(3, 10)
        live.metrics({"loss": 2.3125, "learning_rate": 1e-4, "tokens_per_s": 1204.4})
        bar.refresh()
    assert "3/10 loss 2.312, 1,204 tokens/s" in out.getvalue()
    assert figures_text({"reward": 0.5}) == "reward 0.5" and figures_text({}) == ""
