"""A local MLflow tracking server (started and stopped here) and the tiny SFT fixtures."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.train.conftest import sft_rows, tiny_model  # noqa: F401 (fixtures)

STARTUP_S = 240.0
"""Bounded wait for the server (its first start imports MLflow's server stack: slow on a loaded CPU)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with a SQLite store in a temporary folder; its URI."""
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent))
    if mlflow is None:
        pytest.fail("mlflow is not installed: pip install 'mlflow-skinny==3.17.2'")
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
        "--artifacts-destination", str(home / "art"),
    ]  # fmt: skip
    log = (home / "server.log").open("wb")
    server = subprocess.Popen(command, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    said = home / "server.log"
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"mlflow server exited with {server.returncode}: {said.read_text()}")
            try:
                if httpx.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not up after {STARTUP_S:.0f} s: {said.read_text()}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
