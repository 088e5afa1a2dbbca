"""The dispatched path across nodes, against a real Prefect server: a parent flow
(:mod:`tests.flows.dispatch_sft`) sends an SFT step with ``sft.nodes=2`` to the gpu pool's
``run-one-step/gpu`` deployment; the pool's worker (node 0 of the gang: its environment names the
rendezvous and ``COA_NODES_DIR``) runs the flow run, whose step launches torchrun as node 0; the node
agent started beside it as node 1 (``python -m coa.kit.node``, as the job template starts it on
the other machines) joins that launch. The step commits a model that loads, with the planned steps run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coa import io

from .test_deployment import BIN, REPO, _start, _stop
from .test_deployment import prefect_env as prefect_env  # the fixture: a server on a fresh database
from .test_worker_killed import _gpu_pool, _inputs

pytestmark = pytest.mark.slow
SFT = [
    *("dispatch.mode=deployment", "sft.time_budget_s=null", "sft.max_steps=8", "sft.save_steps=4"),
    *("sft.batch_size=8", "sft.max_length=256", "sft.logging_steps=1"),
    *("sft.launcher=torchrun", "sft.num_processes=1", "sft.nodes=2"),
]


def test_a_step_on_two_nodes_dispatched_to_the_gpu_pool_completes(
    prefect_env: dict[str, str], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gang = {"COA_RDZV_ENDPOINT": f"127.0.0.1:{port}", "COA_NODES_DIR": str(tmp_path / "nodes")}
    env = prefect_env | gang | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    _gpu_pool(env)
    worker = _start([str(BIN / "prefect"), "worker", "start", "--pool", "gpu"], env, tmp_path / "worker.log")
    agent = _start(
        [sys.executable, "-m", "coa.kit.node", "--idle-exit-s", "300"],
        env | {"COA_NODE_RANK": "1"},
        tmp_path / "agent.log",
    )
    try:
        deploy = subprocess.run(
            [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "gpu"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert deploy.returncode == 0, f"prefect deploy --name gpu failed:\n{deploy.stdout}{deploy.stderr}"
        model, data = _inputs(tmp_path)
        parent = subprocess.run(
            [sys.executable, "-m", "tests.flows.dispatch_sft", model, data, json.dumps(SFT)],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        said = parent.stdout + parent.stderr
        assert parent.returncode == 0, said[-3000:] + (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        _stop(worker)
        _stop(agent)
    wall_s = time.monotonic() - started
    uri = said.rsplit("model: ", 1)[1].split()[0]
    result = json.loads(io.read_file(uri, "sft_result.json"))
    assert result["global_step"] == result["steps_planned"] == result["steps_run"] == 8, result
    AutoModelForCausalLM.from_pretrained(str(Path(uri) / "model"))
    joined = (tmp_path / "agent.log").read_text()
    assert "node 1: joining launch" in joined and "(torchrun, 2 nodes)" in joined, joined
    assert "exited with 0" in joined, joined
    assert not (tmp_path / "nodes" / "launch.json").exists()  # no agent can join a finished launch
    assert os.environ.get("COA_NODE_RANK") is None  # the gang's variables stayed in the subprocesses
    losses = [round(v, 5) for _, v in result["loss_curve"]]
    print(f"\ndispatched SFT on 2 nodes: {wall_s:.0f} s in all (server up to commit), losses {losses}")
