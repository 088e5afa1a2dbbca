"""End to end through a real Prefect server: deploy prefect.yaml, run a worker, trigger a run.

Starts ``prefect server`` on 127.0.0.1 (free port, private PREFECT_HOME), creates the ``cpu``
process work pool, deploys with ``prefect deploy --all``, starts a worker, triggers
``prefect deployment run 'pipeline/demo'``, waits for Completed, checks the Prefect artifacts and
the storage artifact, then stops everything it started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coa import io

from .test_pipeline_flow import TINY_TRAINING

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def prefect_env(tmp_path: Path, storage_root: Path) -> Iterator[dict[str, str]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_WORKER_PREFETCH_SECONDS="1",
        COA_PROJECT_DIR=str(REPO),
        COA_STORAGE_ROOT=str(storage_root),
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )
    server = _start(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        env,
        tmp_path / "server.log",
    )
    env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{env['PREFECT_API_URL']}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prefect server did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        yield env
    finally:
        _stop(server)


def _prefect(env: dict[str, str], *args: str, timeout: int = 120) -> str:
    out = subprocess.run(
        [str(BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, f"prefect {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_deploy_run_and_collect_artifacts(
    prefect_env: dict[str, str], tmp_path: Path, storage_root: Path
) -> None:
    env = prefect_env
    _prefect(env, "work-pool", "create", "cpu", "--type", "process")
    _prefect(env, "--no-prompt", "deploy", "--all")
    listing = _prefect(env, "deployment", "ls")
    assert "pipeline/demo" in listing and "pipeline/nightly" in listing

    worker = _start([str(BIN / "prefect"), "worker", "start", "--pool", "cpu"], env, tmp_path / "worker.log")
    try:
        small = json.dumps(
            [
                "synthetic.train={arithmetic: 4, multihop: 4, programming: 2}",
                "synthetic.heldout={arithmetic: 1, multihop: 1, programming: 1}",
                "curate.gate.correctness_floor=0.3",
                *TINY_TRAINING,
            ]
        )
        out = _prefect(
            env,
            "deployment",
            "run",
            "pipeline/demo",
            "--param",
            f"overrides={small}",
            "--watch",
            "--watch-timeout",
            "240",
            timeout=300,
        )
        assert "Completed" in out, out + (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        _stop(worker)

    api = env["PREFECT_API_URL"]
    runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
    demo = [r for r in runs if r["state_type"] == "COMPLETED"]
    assert len(demo) == 1, [(r["name"], r["state_type"]) for r in runs]
    arts = httpx.post(f"{api}/artifacts/filter", json={}, timeout=10).json()
    by_key = {a["key"]: a for a in arts if a.get("key")}
    expected = {
        "pipeline-row-counts",
        "pipeline-summary",
        "collect-summary",
        "curate-headline",
        "curate-report",
    }
    assert expected <= set(by_key)
    rows = by_key["pipeline-row-counts"]["data"]
    rows = json.loads(rows) if isinstance(rows, str) else rows
    collect_row = next(r for r in rows if r["stage"] == "collect")
    assert collect_row["rows"] == 10
    # the storage artifact the run produced is committed and readable through its contract
    assert io.read_table(collect_row["artifact"]).num_rows == 10
    assert collect_row["artifact"].startswith(str(storage_root))
