"""`coa collect` with the offline teacher on the synthetic families: real tools, kill and resume."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from coa import io
from coa.cli import app

REPO = Path(__file__).resolve().parents[1]
COA = str(Path(sys.executable).parent / "coa")
runner = CliRunner()


def synthetic(tmp_path: Path, *overrides: str) -> str:
    result = runner.invoke(app, ["tasks", "synthetic", *overrides])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_offline_collect_uses_the_tools_for_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    tasks = synthetic(
        tmp_path,
        "synthetic.train={arithmetic: 6, multihop: 6, programming: 4}",
        "synthetic.heldout={arithmetic: 1, multihop: 1, programming: 1}",
    )
    result = runner.invoke(app, ["collect", "--tasks", tasks, "--table", "train"])
    assert result.exit_code == 0, result.output
    uri = result.output.split("trajectories: ", 1)[1].split()[0]
    assert runner.invoke(app, ["validate", uri]).exit_code == 0
    rows = io.read_table(uri).to_pylist()
    assert len(rows) == 16 and all(r["status"] == "completed" for r in rows)
    for r in rows:
        calls = [s for s in r["steps"] if s["role"] == "tool_call"]
        assert calls, r["run_id"]
        if r["family"] == "math":  # the code really ran in the sandbox and printed the answer
            executed = [
                s for s in calls if s["tool_name"] == "code" and s["observation"].startswith("[EXECUTED]")
            ]
            assert executed and r["gold_answers"][0] in executed[-1]["observation"]
            assert r["final_answer"] == r["gold_answers"][0]
        if r["family"] == "mhqa":  # search hits come from the local index
            searches = [s for s in calls if s["tool_name"] == "web_search"]
            assert searches and all("local://doc/" in s["observation"] for s in searches)
        if r["family"] == "code":
            assert "```py\n" in r["final_answer"]
    roles = {s["role"] for r in rows for s in r["steps"]}
    assert {"plan", "think", "tool_call", "delegate", "reflection", "verification", "final_answer"} <= roles


def test_unknown_tasks_are_recorded_as_errors_not_faked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage_root: Path
) -> None:
    """Every run failed (the offline teacher cannot answer): not a success, nothing committed, exit 3."""
    monkeypatch.chdir(REPO)
    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps({"question": "What is the capital of France?", "answer": "Paris"}) + "\n")
    imported = runner.invoke(app, ["tasks", "import", str(src), "--family", "web"])
    assert imported.exit_code == 0, imported.output
    out = imported.stdout.strip().splitlines()[-1]
    # imported tasks carry no encyclopedia: the local search refuses to start, saying where one comes from
    refused = runner.invoke(app, ["collect", "--tasks", out])
    assert refused.exit_code == 2 and "given no encyclopedia" in " ".join(refused.output.split())
    pages = synthetic(tmp_path, "synthetic.train={arithmetic: 1}", "synthetic.heldout={}")
    result = runner.invoke(app, ["collect", "--tasks", out, "--encyclopedia", pages])
    assert result.exit_code == 3, result.output
    message = " ".join(result.stderr.split())
    assert "failed as a whole: 1 of 1 runs (100%" in message and "OfflineBackendUnsupported" in message
    assert "nothing was committed" in message and "Traceback" not in result.output
    assert not list((storage_root / "trajectories").glob("*/_COMMITTED"))


def _checkpoints(root: Path) -> list[Path]:
    return sorted((root / "checkpoints").glob("trajectories/*/*.parquet"))


def _checkpointed_runs(root: Path) -> int:
    """Runs in the committed checkpoint batches (a file being renamed into place is retried)."""
    total = 0
    for path in _checkpoints(root):
        with contextlib.suppress(OSError, pa.ArrowInvalid):
            total += pq.read_metadata(path).num_rows
    return total


PLANNED = 150
"""The kill test's runs: its first checkpoint batch (64 runs, or those done in 5 s) ends well before."""


@pytest.mark.slow
def test_kill_then_resume_loses_and_duplicates_nothing(tmp_path: Path, storage_root: Path) -> None:
    os.chdir(REPO)
    tasks = synthetic(
        tmp_path,
        "synthetic.train={arithmetic: 60, multihop: 60, programming: 30}",
        "synthetic.heldout={arithmetic: 1, multihop: 1, programming: 1}",
    )
    env = {**os.environ, "COA_STORAGE_ROOT": str(storage_root)}
    cmd = [COA, "collect", "--tasks", tasks, "--table", "train", "collect.concurrency=1"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _checkpointed_runs(storage_root) < 15:
        assert proc.poll() is None, "collection finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = _checkpointed_runs(storage_root)
    assert 15 <= before < PLANNED
    assert not list((storage_root / "trajectories").glob("*/_COMMITTED"))  # nothing committed yet

    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    uri = done.stdout.split("trajectories: ", 1)[1].split()[0]
    table = io.read_table(uri)
    ids = table.column("run_id").to_pylist()
    assert len(ids) == PLANNED and len(set(ids)) == PLANNED
    planned = io.read_table(tasks, "train").column("task_id").to_pylist()
    assert ids == [f"{t}#0" for t in planned]  # plan order, nothing lost
    assert pc.all(pc.is_valid(table.column("status"))).as_py()
    assert _checkpoints(storage_root) == []  # cleaned up after the commit
    # the runs checkpointed before the kill were reused, not redone
    lineage = io.read_lineage(uri)
    assert lineage["collect"]["resumed"] == before
    assert lineage["collect"]["ran"] == PLANNED - before
