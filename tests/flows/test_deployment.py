"""End to end through a real Prefect server: deploy prefect.yaml, run workers, trigger runs.

Starts ``prefect server`` on 127.0.0.1 (free port, private PREFECT_HOME, a fresh PostgreSQL
database: :mod:`tests.flows.postgres`), creates the ``cpu`` and ``gpu`` process work pools, deploys
with ``prefect deploy --all``, starts workers, triggers ``prefect deployment run 'pipeline/demo'``,
waits for Completed, checks the Prefect artifacts and the storage artifacts, then stops everything it
started. Steps dispatched to the ``gpu`` pool's worker (``dispatch.mode=deployment``) are checked by
``test_nightly_pool`` (SFT and RL built there, linked as subflows, the flow continuing with what that
worker committed) and ``test_failed_step`` (the pipeline's curation dispatched there and failing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coa import io

from .postgres import Postgres
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
def prefect_env(tmp_path: Path, storage_root: Path, postgres: Postgres) -> Iterator[dict[str, str]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_API_DATABASE_CONNECTION_URL=postgres.database_url(),  # as production runs it
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_WORKER_PREFETCH_SECONDS="1",
        COA_PROJECT_DIR=str(REPO),
        COA_STORAGE_ROOT=str(storage_root),
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )
    # The UI is served too (the headless-browser check below); on a non-default port it must be told
    # where its API is (the README's recipe).
    env["PREFECT_UI_API_URL"] = f"http://127.0.0.1:{port}/api"
    server = _start(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
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


def _deploy(env: dict[str, str]) -> None:
    for pool in ("cpu", "gpu"):
        _prefect(env, "work-pool", "create", pool, "--type", "process")
    _prefect(env, "--no-prompt", "deploy", "--all")


def test_deploy_run_and_collect_artifacts(
    prefect_env: dict[str, str], tmp_path: Path, storage_root: Path
) -> None:
    env = prefect_env
    _deploy(env)
    listing = _prefect(env, "deployment", "ls")
    assert "pipeline/demo" in listing and "nightly/nightly" in listing and "run-one-step/gpu" in listing

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
        "pipeline-demo-row-counts",
        "pipeline-demo-summary",
        "pipeline-demo-collect-summary",
        "pipeline-demo-curate-headline",
        "pipeline-demo-curate-report",
    }
    assert expected <= set(by_key)
    assert demo[0]["name"].startswith("pipeline-demo-")  # named by profile and start time
    rows = by_key["pipeline-demo-row-counts"]["data"]
    rows = json.loads(rows) if isinstance(rows, str) else rows
    collect_row = next(r for r in rows if r["stage"] == "collect")
    assert collect_row["rows"] == 10
    # the storage artifact the run produced is committed and readable through its contract
    assert io.read_table(collect_row["artifact"]).num_rows == 10
    assert collect_row["artifact"].startswith(str(storage_root))
    _check_ui(env, tmp_path, demo[0]["id"], sorted(by_key))


def _page_text(url: str, screenshot: Path | None = None, expect: tuple[str, ...] = ()) -> str:
    """The visible text of a page after its scripts ran (headless Chromium), and a screenshot.

    ``expect``: texts the page must show; on a loaded machine a page (the artifacts grid of a full
    run) sometimes renders its cards after the virtual-time budget, so it is loaded up to 3 times."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None
    text = ""
    for _ in range(3):
        profile = tempfile.mkdtemp(prefix="coa-chromium-")  # its own profile: never handed to another browser
        flags = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000"]
        flags.append(f"--user-data-dir={profile}")
        if screenshot is not None:
            subprocess.run([*flags, "--window-size=1400,1000", f"--screenshot={screenshot}", url],
                           capture_output=True, timeout=120)  # fmt: skip
        dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        shutil.rmtree(profile, ignore_errors=True)
        dom = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", dom, flags=re.S)
        text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
        if all(e in text for e in expect):
            break
    return text


def _check_ui(env: dict[str, str], tmp_path: Path, flow_run_id: str, keys: list[str]) -> None:
    """What a user sees in the Prefect UI: the deployments with their schedule, the flow run, and
    the run's artifacts, rendered by the real UI in headless Chromium."""
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.skip(
            "the UI check needs headless Chromium: apt-get install chromium (make test does, as root)"
        )
    ui = env["PREFECT_API_URL"].removesuffix("/api")
    shots = Path(os.environ.get("COA_UI_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    deployments = _page_text(f"{ui}/deployments", shots / "deployments.png")
    assert "demo" in deployments and "nightly" in deployments and "run-one-step" in deployments
    nightly = _page_text(f"{ui}/deployments/deployment/{_deployment_id(env, 'nightly', 'nightly')}")
    assert "0 3 * * *" in nightly or "03:00" in nightly or "3:00 AM" in nightly, nightly[:1500]
    run = _page_text(f"{ui}/runs/flow-run/{flow_run_id}", shots / "flow-run.png")
    assert "Completed" in run and "pipeline" in run
    shown = tuple(f"pipeline-demo-{key}" for key in ("summary", "row-counts", "collect-summary",
                  "curate-headline", "lineage", "evaluate-before-metrics", "report-comparison"))  # fmt: skip
    artifacts = _page_text(f"{ui}/artifacts", shots / "artifacts.png", expect=shown)
    for key in shown:
        assert key in keys, key
        if key not in artifacts:  # the list shows its first page (50 of the run's ~53): the key's own page
            page = _page_text(f"{ui}/artifacts/key/{key}", expect=(key,))
            assert key in page, (key, artifacts[:2000], page[:1000])
    summary = _page_text(f"{ui}/artifacts/key/pipeline-demo-summary", shots / "pipeline-summary.png")
    assert "Pipeline summary" in summary


def _deployment_id(env: dict[str, str], flow: str, name: str) -> str:
    api = env["PREFECT_API_URL"]
    return str(httpx.get(f"{api}/deployments/name/{flow}/{name}", timeout=10).json()["id"])
