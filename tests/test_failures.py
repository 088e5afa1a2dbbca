"""Every user-facing failure is one line with the fix, and the exit code of its kind.

A model that does not exist, an artifact of the wrong kind for a stage, an endpoint without the API
the backend needs, Ctrl-C in a collection, and the dry run after an interrupted SFT.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.model import init_model, sft_corpus
from coa.plan.preview import preview
from coa.steps import ModelInput, TableInput, run_step
from coa.train import step as sft_step
from coa.train.config import SFTStageConfig
from tests.train.conftest import TINY
from tests.train.rows import arith_rows

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "demo.yaml")
TASKS = ("synthetic.train={arithmetic: 4, multihop: 2, programming: 2}",
         "synthetic.heldout={arithmetic: 2, multihop: 1, programming: 1}")  # fmt: skip
runner = CliRunner()


def one_line(result: Any) -> str:
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[-1]


def _artifact(store: io.Store, kind: str, table: str, rows: Any, contract: schemas.Contract) -> str:
    writer = store.writer(kind, "x", {"kind": kind})
    writer.write_table(table, rows, contract)
    return writer.commit().uri


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(100, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


def test_evaluate_a_model_folder_that_does_not_exist(storage_root: Path) -> None:
    result = runner.invoke(app, ["evaluate", "--model", "/nonexistent", "-c", CONFIG])
    assert result.exit_code == 2
    line = one_line(result)
    assert "--model /nonexistent: no such model folder" in line and "champion:NAME" in line


def test_evaluate_an_artifact_that_is_not_a_model(storage_root: Path) -> None:
    converted = _artifact(io.Store(), "converted", "sft", arith_rows(4, seed=0), schemas.SFT)
    result = runner.invoke(app, ["evaluate", "--model", converted, "-c", CONFIG])
    assert result.exit_code == 2
    line = one_line(result)
    assert f"--model {converted} is a converted artifact (kind converted), not a model" in line
    assert "`coa sft` / `coa rl`" in line


def test_sft_given_a_curated_artifact_names_the_command_that_converts_it(storage_root: Path) -> None:
    runs = schemas.TRAJECTORY.empty_table()
    curated = _artifact(io.Store(), "curated", "trajectories", runs, schemas.TRAJECTORY)
    result = runner.invoke(app, ["sft", "--data", curated, "-c", CONFIG])
    assert result.exit_code == 2
    line = one_line(result)
    assert f"{curated} is a curated artifact" in line and "not one with a 'sft' table" in line
    assert f"coa convert --curated {curated}" in line


class _NoTokenIds(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server without vLLM's token-id API: it refuses the extra fields (422)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {"detail": [{"loc": ["body", "return_token_ids"], "msg": "extra fields not permitted"}]}
        )
        try:
            self.send_response(422)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on its other requests after
            pass  # the first 422; socketserver would print a traceback into the CLI's captured stderr

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def no_token_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoTokenIds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_evaluate_against_a_server_without_the_token_id_api(
    tiny_model: Path, no_token_server: str, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    made = runner.invoke(app, ["tasks", "synthetic", "-c", CONFIG, *TASKS])
    assert made.exit_code == 0, made.output
    tasks = made.stdout.strip().splitlines()[-1]
    result = runner.invoke(
        app,
        ["evaluate", "--model", str(tiny_model), "--tasks", tasks, "--limit", "1", "-c", CONFIG,
         "evaluate.backend=endpoint",
         f"endpoints.vllm={{base_url: '{no_token_server}', model: m}}", "evaluate.endpoint=vllm"],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    line = one_line(result)
    assert "does not speak vLLM's token-id completions API (HTTP 422" in line
    assert "evaluate.backend=hf" in line and "vllm serve" in line


def test_ctrl_c_in_collect_says_what_was_saved_and_how_to_resume(storage_root: Path) -> None:
    made = runner.invoke(app, ["tasks", "synthetic", "-c", CONFIG,
                               "synthetic.train={arithmetic: 160, multihop: 80}",
                               "synthetic.heldout={arithmetic: 1, multihop: 1}"])  # fmt: skip
    assert made.exit_code == 0, made.output
    tasks = made.stdout.strip().splitlines()[-1]
    args = ["collect", "--tasks", tasks, "--table", "train", "-c", CONFIG, "collect.concurrency=1"]
    env = {**os.environ, "COA_STORAGE_ROOT": str(storage_root), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "coa.cli", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120

    def runs_under_way() -> bool:
        """A checkpoint is flushed (every 5 s), or the teacher's tools have answered a few calls: the
        observation cache grows as runs finish, so a Ctrl-C now has finished runs to save (a fast
        machine finishes the 240 offline runs before the first 5-second flush)."""
        if list(storage_root.glob("checkpoints/trajectories/*/*.parquet")):
            return True
        return len(list(storage_root.glob("observations/*/*.json"))) >= 8

    while not runs_under_way():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    assert proc.poll() is None, ("collect finished before the Ctrl-C", proc.communicate())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "interrupted: collect was not committed;" in lines[0]
    assert (
        "finished run(s) are checkpointed in" in lines[0] and "rerun the same command to resume" in lines[0]
    )
    saved = int(lines[0].split("committed; ", 1)[1].split()[0])
    assert saved >= 1
    again = runner.invoke(app, args, env={"COA_STORAGE_ROOT": str(storage_root)})
    assert again.exit_code == 0, again.output
    assert f"resumed {saved} of 240 runs from checkpoints" in again.stderr


class InterruptAt(TrainerCallback):
    """Stops the run like Ctrl-C after a step: a KeyboardInterrupt with no text."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_dry_run_after_an_interrupted_sft_names_the_checkpoint_it_resumes_from(
    tiny_model: Path, tmp_path: Path
) -> None:
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("converted", "coa", {"test": 1})
    writer.write_table("sft", arith_rows(32, seed=1), schemas.SFT)
    data = TableInput(writer.commit(), "sft")
    config = SFTStageConfig(max_steps=4, learning_rate=3e-3, batch_size=8, max_length=256,
                            logging_steps=1, save_steps=2, launcher="in_process")  # fmt: skip
    base = ModelInput(external=str(tiny_model))
    with pytest.raises(KeyboardInterrupt):
        run_step(sft_step.step(config, base, data, callbacks=[InterruptAt(3)]), store)
    (planned,) = preview([sft_step.step(config, base, data)], store)
    assert planned.status.startswith(
        "build (last attempt failed: interrupted (Ctrl-C); resumes from checkpoint 2 ("
    ) and planned.status.endswith("/checkpoints/checkpoint-2))")  # read from disk: its path
