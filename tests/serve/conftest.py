"""``python -m coa.serve`` started by the tests on 127.0.0.1, over the rollout tests' tiny random Qwen2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rollout.conftest import codec, tiny_model  # noqa: F401 (fixtures)
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[2]


class ServeProcess:
    """A ``coa.serve`` subprocess: ``url`` is its base URL (``.../v1``), ``root`` without ``/v1``."""

    def __init__(self, model: Path, *extra: str, dev_mode: bool = True) -> None:
        env = os.environ | {"PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
        env["VLLM_SERVER_DEV_MODE"] = "1" if dev_mode else "0"  # vLLM's RL routes, gated as vLLM gates them
        command = [sys.executable, "-m", "coa.serve", "--model", str(model), "--port", "0", "--threads", "1"]
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - stderr: never a pipe nobody drains
        self.process = subprocess.Popen(
            [*command, *extra], stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=REPO
        )
        self.url = self.root = ""

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                self.log.seek(0)
                err = self.log.read()
                raise RuntimeError(
                    f"coa.serve exited {self.process.wait()} before it was ready: {err[-2000:]}"
                )
            if "coa.serve:" in line:
                self.url = line.split(" on ", 1)[1].strip()
                self.root = self.url.removesuffix("/v1")
                return
        raise TimeoutError(f"coa.serve not ready in {timeout_s} s")

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, then its exit code (killed after ``timeout_s``: then the code is the kill's)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@pytest.fixture(scope="module")
def serve(tiny_model: Path) -> Iterator[ServeProcess]:  # noqa: F811 (the imported fixture)
    server = ServeProcess(tiny_model, "--served-model-name", "student")
    try:
        server.wait_ready()
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"coa.serve did not shut down cleanly (exit {code})"
