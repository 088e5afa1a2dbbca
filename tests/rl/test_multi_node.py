"""RL across two CPU "nodes" with two serving replicas: the RL recipe launched by the trainer kit as
node 0 (torchrun, one gloo rank) with ``python -m coa.kit.node`` as node 1, against two
``coa.serve`` processes in vLLM mode (``rl.rollout.server`` and its ``replicas``): the run finishes
its planned steps with whole groups, rank 0 pushes every version to both replicas (each ends on the
last version), and both replicas served generations. ``python -m pytest -q tests/rl/test_multi_node.py``.
"""

from __future__ import annotations

import collections
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from coa.kit import nodes
from coa.kit.launch import LOG_FILE, launch
from coa.rl.config import RL, RLRunConfig
from coa.tools.config import ToolsConfig
from tests.serve.conftest import ServeProcess

from .helpers import prompts_table
from .test_server_backend import server_config

ROOT = Path(__file__).resolve().parents[2]
STEPS, PROMPTS_PER_STEP, GROUP = 3, 2, 4


@pytest.fixture(scope="module")
def replicas(tiny_model: Path) -> Iterator[list[ServeProcess]]:
    """Two coa.serve replicas of the tiny model (vLLM protocol), as ``student``."""
    servers = [ServeProcess(tiny_model, "--served-model-name", "student") for _ in range(2)]
    try:
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


def _info(server: ServeProcess) -> dict[str, object]:
    response = httpx.get(f"{server.root}/server_info", timeout=30)
    assert response.status_code == 200, response.text
    info: dict[str, object] = response.json()["coa"]
    return info


@pytest.mark.slow  # two trainer ranks and two servers (each imports torch)
def test_rl_on_two_nodes_pushes_to_both_replicas_and_spreads_its_requests(
    replicas: list[ServeProcess], tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(nodes.ENDPOINT_ENV, f"127.0.0.1:{port}")
    monkeypatch.setenv(nodes.NODES_DIR_ENV, str(tmp_path / "nodes"))
    monkeypatch.setenv(nodes.TIMEOUT_ENV, "60")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.chdir(ROOT)
    first, second = replicas
    before = [int(str(_info(r)["requests"])) for r in replicas]
    base = server_config(tiny_model, first, tools=ToolsConfig(enabled=(), record="off"))
    server = base.rollout.server
    assert server is not None
    rollout = base.rollout.model_copy(
        update={"server": server.model_copy(update={"replicas": (second.url,)})}
    )
    config = RLRunConfig.model_validate(
        base.model_dump()
        | {"rollout": rollout.model_dump(), "launcher": "torchrun", "num_processes": 1, "nodes": 2}
        | {"max_steps": STEPS, "prompts_per_step": PROMPTS_PER_STEP, "group_size": GROUP}
    )
    out = tmp_path / "out"
    out.mkdir()
    env = os.environ | {"COA_NODE_RANK": "1", "PYTHONPATH": str(ROOT)}
    with (tmp_path / "agent.log").open("wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "coa.kit.node", "--once", "--idle-exit-s", "240"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    t0 = time.perf_counter()
    try:
        result = launch(RL, prompts_table(6), config, out, config)
    finally:
        try:
            code = agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
            code = agent.wait()
    wall_s = time.perf_counter() - t0
    assert code == 0, (tmp_path / "agent.log").read_text()[-3000:]
    node0, node1 = (out / LOG_FILE).read_text(), (out / "train.node1.log").read_text()
    started = [re.findall(r"coa.rl INFO rank (\d) of 2 \(pid (\d+)", text) for text in (node0, node1)]
    assert [[r for r, _ in found] for found in started] == [["0"], ["1"]], node0[-2000:]
    assert result["global_step"] == STEPS
    stats = result["rollout_stats"]
    assert stats["weight_syncs"] == STEPS  # rank 0's pushes, one per generation batch (to every replica)
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    kept = [r for r in rows if r["kept"]]
    assert len(kept) == STEPS * PROMPTS_PER_STEP * GROUP
    groups = collections.Counter((r["step"], r["group"]) for r in kept)
    assert set(groups.values()) == {GROUP}  # whole groups
    assert all(r["policy_version"] == r["step"] for r in rows)
    infos = [_info(r) for r in replicas]
    assert [i["weight_version"] for i in infos] == [str(STEPS - 1)] * 2  # each replica holds the last push
    served = [int(str(i["requests"])) - b for i, b in zip(infos, before, strict=True)]
    assert all(n > 0 for n in served), served  # the client spread its requests over both
    print(f"\nRL on 2 nodes, 2 replicas: {wall_s:.1f} s, {STEPS} steps, {len(kept)} kept episodes in "
          f"{len(groups)} groups, requests per replica {served}, "
          f"versions {[i['weight_version'] for i in infos]}, "
          f"weight sync {stats['weight_sync_s']} s")  # fmt: skip
