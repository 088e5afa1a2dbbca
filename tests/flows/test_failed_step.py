"""A step that fails on a work pool ends its flow runs Failed with the step's one-line reason and
without a crash traceback, on a real Prefect server with ``cpu`` and ``gpu`` process pools.

A flow run that a worker executes and that ends Failed (our flows return ``Failed(message=…)``)
makes Prefect's engine re-raise the state's ``FailedRun`` after the state is set, and log it as
"Engine execution exited with unexpected exception" with a traceback, as if the run had crashed:
the dispatched step's child run and the parent it fails both did. Neither may log that now; a flow
body that stops on a project error (a bad override) ends Failed in one line too, not with Prefect's
"Encountered exception during execution" traceback.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .test_deployment import BIN, REPO, _deploy, _start, _stop, prefect_env  # noqa: F401  (fixture)
from .test_pipeline_flow import SMALL

pytestmark = pytest.mark.slow
CRASH = ("Engine execution exited with unexpected exception", "Encountered exception during execution")
FAILING = [  # curation dispatched to the gpu pool, where its gate cannot pass
    *SMALL[:2],
    "curate.gate.correctness_floor=1.0",
    "curate.filters.require_correct=false",
    "collect.offline.slip_rate=0.5",
    "dispatch.mode=deployment",
    "dispatch.gpu_steps=[curate]",
]


def _run(env: dict[str, str], deployment: str, *params: str) -> subprocess.Popen[str]:
    """``prefect deployment run --watch`` started (the three runs of the test go at once)."""
    command = [str(BIN / "prefect"), "deployment", "run", deployment]
    for param in params:
        command += ["--param", param]
    command += ["--watch", "--watch-timeout", "300"]
    return subprocess.Popen(
        command, env={**env, "COLUMNS": "240"}, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _wait(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, _ = proc.communicate(timeout=360)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _post(env: dict[str, str], path: str, body: dict[str, Any] | None = None) -> Any:
    return httpx.post(f"{env['PREFECT_API_URL']}/{path}", json=body or {}, timeout=10).json()


def _logs(env: dict[str, str], run: dict[str, Any]) -> list[str]:
    """The run's log messages on the server, once its last line ("Finished in state …") arrived."""
    deadline = time.monotonic() + 60
    while True:
        body = {"logs": {"flow_run_id": {"any_": [run["id"]]}}, "sort": "TIMESTAMP_ASC"}
        messages = [str(log["message"]) for log in _post(env, "logs/filter", body)]
        if any("Finished in state" in m for m in messages) or time.monotonic() > deadline:
            return messages
        time.sleep(1)


def _no_crash(messages: list[str], where: str) -> None:
    for message in messages:
        assert not any(c in message for c in CRASH) and "Traceback" not in message, (where, message)


def test_a_failed_step_fails_its_flow_runs_in_one_line_without_a_crash_traceback(
    prefect_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
    storage_root: Path,
) -> None:
    env = prefect_env
    _deploy(env)
    logs = {pool: tmp_path / f"{pool}-worker.log" for pool in ("cpu", "gpu")}
    workers = [_start([str(BIN / "prefect"), "worker", "start", "--pool", p], env, logs[p]) for p in logs]
    try:
        started = [
            _run(env, "pipeline/demo", f"overrides={json.dumps(FAILING)}"),
            _run(env, "run-one-step/gpu", 'spec={"name": "sft"}'),  # not a spec: refused
            _run(env, "pipeline/demo", 'overrides=["sft.no_such_field=1"]'),
        ]
        try:
            failed, refused, bad_input = [_wait(proc) for proc in started]
        finally:
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
    finally:
        for worker in workers:
            _stop(worker)
    said = {pool: log.read_text() for pool, log in logs.items()}
    assert failed.returncode == 1 and refused.returncode == 1 and bad_input.returncode == 1, said

    flows = {f["id"]: f["name"] for f in _post(env, "flows/filter")}
    runs = _post(env, "flow_runs/filter", {"sort": "EXPECTED_START_TIME_ASC"})
    pipelines = [r for r in runs if flows[r["flow_id"]] == "pipeline"]  # started at once: told by overrides
    parent = next(r for r in pipelines if r["parameters"]["overrides"] == FAILING)
    broken = next(r for r in pipelines if r["parameters"]["overrides"] == ["sft.no_such_field=1"])
    child = next(r for r in runs if r["name"] == f"{parent['name']}/curate")
    alone = next(r for r in runs if flows[r["flow_id"]] == "run-one-step" and r["id"] != child["id"])

    # the step's own reason, one line, as each run's state message
    reason = "check failed: curation gate failed"
    assert child["state_type"] == "FAILED" and child["state"]["message"].startswith(reason)
    assert child["work_pool_name"] == "gpu"
    assert parent["state_type"] == "FAILED" and parent["state"]["message"].startswith(f"curate: {reason}")
    assert alone["state_type"] == "FAILED"
    assert alone["state"]["message"].startswith("input error: not a step spec of version"), alone["state"]
    assert broken["state_type"] == "FAILED" and broken["state"]["message"].startswith("input error:")
    assert "no_such_field" in broken["state"]["message"]
    for run in (child, parent, alone, broken):
        assert "\n" not in run["state"]["message"], run["state"]["message"]

    # logged once as the reason, never as a crash: on the server and in what the workers printed
    for run in (child, parent, alone, broken):
        messages = _logs(env, run)
        assert any("Finished in state Failed" in m for m in messages), (run["name"], messages)
        _no_crash(messages, run["name"])
    assert any(reason in m for m in _logs(env, child))
    for pool, text in said.items():
        _no_crash(text.splitlines(), f"{pool} worker")
    assert child["id"] in said["gpu"] and alone["id"] in said["gpu"]  # the gpu worker ran both
