"""SFT across nodes, proven on two CPU "nodes" of this machine: the step's launcher as node 0 and the
node agent (``python -m coa.kit.node``) as node 1, each a ``torchrun`` (or ``accelerate launch``)
of one gloo rank, rendezvousing on 127.0.0.1 (:mod:`coa.kit.nodes`). Under DDP and FSDP2 they
train like one process at the same global batch (the tolerances of test_multi_rank.py); node 1 frozen
mid-run (its agent and its rank, SIGSTOP: sockets left open, the hard case) fails the run on node 0 in
seconds through the heartbeats, and the retry (a restarted
agent, a new launch) resumes from the last complete checkpoint to weights equal to one process's.
Run: ``python -m pytest -q tests/train/test_multi_node.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coa.kit import nodes
from coa.kit.launch import LOG_FILE, descendants, launch
from coa.train.config import SFT, SFTError, SFTRunConfig, SFTStageConfig
from coa.train.sft import run_sft

from .test_multi_rank import (
    LAUNCH_TIMEOUT_S,
    LOSS_TOLERANCE,
    RANK_LINE,
    SHARD_LINE,
    WEIGHT_TOLERANCE,
    _config,
)

ROOT = Path(__file__).resolve().parents[2]
FAILED_WITHIN_S = 30.0
"""Node 0's launch must fail this soon after node 1 is frozen (COA_NODE_SILENT_S=5 in the test; no hang
until a rendezvous or collective timeout)."""


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_process(tiny_model: Path, sft_rows: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The 12-step run in this process (one thread, as each rank has): what the two nodes must match."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_sft(sft_rows, _config(tiny_model, max_steps=12), tmp_path_factory.mktemp("one") / "one")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The environment of a two-node gang on 127.0.0.1 (a free port); the shared announcement folder."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(nodes.ENDPOINT_ENV, f"127.0.0.1:{port}")
    monkeypatch.setenv(nodes.NODES_DIR_ENV, str(tmp_path / "nodes"))
    monkeypatch.setenv(nodes.TIMEOUT_ENV, "60")
    monkeypatch.chdir(ROOT)
    return tmp_path / "nodes"


def _agent(log: Path) -> subprocess.Popen[bytes]:
    """Node 1's agent (one launch), in a session of its own, as the job template starts it."""
    env = os.environ | {"COA_NODE_RANK": "1", "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coa.kit.node", "--once", "--idle-exit-s", str(LAUNCH_TIMEOUT_S)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _ranks(out: Path) -> dict[int, tuple[int, int, str, str]]:
    """``{rank: (world size, pid, distributed type, batch)}`` from both nodes' logs (the last launch's)."""
    found: dict[int, tuple[int, int, str, str]] = {}
    for log in (out / LOG_FILE, out / "train.node1.log"):
        for line in log.read_text().splitlines():
            if m := RANK_LINE.search(line):
                found[int(m[1])] = (int(m[2]), int(m[3]), m[4], m[5])
    return found


def _stop(agent: subprocess.Popen[bytes]) -> int | None:
    try:
        return agent.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        return None


def _two_nodes(
    config: SFTRunConfig, rows: pa.Table, out: Path, agent_log: Path
) -> tuple[dict[str, Any], float]:
    out.mkdir(parents=True, exist_ok=True)
    agent = _agent(agent_log)
    t0 = time.perf_counter()
    try:
        result = launch(SFT, rows, config, out, config)
    finally:
        code = _stop(agent)
    assert code == 0, agent_log.read_text()[-3000:]
    return result, time.perf_counter() - t0


def _freeze_node_after_checkpoint(
    out: Path, agent: subprocess.Popen[bytes], step: int, done: threading.Event
) -> list[float]:
    """SIGSTOP node 1 (its agent and every process under it: the launcher, the rank) once checkpoint
    ``step`` is complete, as a machine that hangs or is cut off: its sockets stay open, so only the
    heartbeats tell node 0 (:class:`coa.kit.nodes.Heartbeats`); the monotonic time of the freeze."""
    state = out / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json"
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not done.is_set() and time.monotonic() < deadline:
        pid = _ranks(out).get(1, (0, 0, "", ""))[1] if (out / "train.node1.log").is_file() else 0
        if state.is_file() and pid:
            for frozen in [agent.pid, *descendants(agent.pid)]:
                os.kill(frozen, signal.SIGSTOP)
            return [time.monotonic()]
        time.sleep(0.01)
    return []


def _end_frozen(agent: subprocess.Popen[bytes]) -> None:
    for pid in [*descendants(agent.pid), agent.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    agent.wait()


@pytest.mark.slow
def test_two_nodes_under_ddp_survive_a_lost_node_and_train_like_one_process(
    tiny_model: Path,
    sft_rows: pa.Table,
    tmp_path: Path,
    rendezvous: Path,
    one_process: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torchrun on two nodes (1 gloo rank each) at the global batch 4 x 2: node 1 is frozen (SIGSTOP, its
    sockets left open) after checkpoint 4; node 0's launch fails within FAILED_WITHIN_S naming the silent
    node (COA_NODE_SILENT_S=5); the retry (a new
    launch, a restarted agent) resumes from the checkpoint and ends at step 12 with one process's loss
    curve and weights (LOSS_TOLERANCE, WEIGHT_TOLERANCE); the announcement is gone after each launch."""
    from transformers import AutoModelForCausalLM

    config = _config(tiny_model, max_steps=12, launcher="torchrun", num_processes=1, nodes=2)
    out = tmp_path / "ddp"
    out.mkdir()
    monkeypatch.setenv(nodes.SILENT_ENV, "5")
    agent = _agent(tmp_path / "agent.log")
    done = threading.Event()
    frozen: list[float] = []
    freezer = threading.Thread(
        target=lambda: frozen.extend(_freeze_node_after_checkpoint(out, agent, 4, done))
    )
    freezer.start()
    try:
        with pytest.raises(SFTError) as failed:
            launch(SFT, sft_rows, config, out, config)
        failed_at = time.monotonic()
    finally:
        done.set()
        freezer.join()
        _end_frozen(agent)
    assert frozen, "node 1 was never frozen: the run ended before its checkpoint at step 4"
    failed_in = failed_at - frozen[0]
    assert failed_in < FAILED_WITHIN_S, f"node 0 took {failed_in:.1f} s to fail"
    message = str(failed.value)
    assert "torchrun on 2 nodes" in message and "rerun the stage to resume" in message, message
    assert "node 1 sent no heartbeat" in message, message
    assert nodes.read_launch(rendezvous) is None

    resumed, resumed_s = _two_nodes(config, sft_rows, out, tmp_path / "agent.log")
    lines = _ranks(out)
    assert sorted(lines) == [0, 1] and {(w, kind) for w, _, kind, _ in lines.values()} == {(2, "MULTI_CPU")}
    assert lines[0][3] == "2 rank(s) x 4 per micro-batch x 1 accumulated = 8 per optimizer step"
    assert resumed["start_step"] in (4, 8) and resumed["global_step"] == resumed["steps_planned"] == 12
    assert resumed["tokens_seen"] == one_process.tokens_seen
    gaps = [abs(a - b) for (_, a), (_, b) in zip(one_process.loss_curve, resumed["loss_curve"], strict=True)]
    assert max(gaps) < LOSS_TOLERANCE
    loaded = AutoModelForCausalLM.from_pretrained(out / "model").state_dict()
    reference = AutoModelForCausalLM.from_pretrained(one_process.model_dir).state_dict()
    weight_gap = max(float((loaded[k] - reference[k]).abs().max()) for k in reference)
    assert weight_gap < WEIGHT_TOLERANCE
    assert nodes.read_launch(rendezvous) is None
    print(f"\n1 process: losses {[round(v, 6) for _, v in one_process.loss_curve]}")
    print(f"2 nodes (DDP): node 1 frozen, node 0 failed {failed_in:.1f} s later; the retry ran "
          f"{resumed_s:.1f} s "
          f"from step {resumed['start_step']}: losses {[round(v, 6) for _, v in resumed['loss_curve']]}, "
          f"largest loss gap {max(gaps):.2e}, largest weight gap {weight_gap:.2e}")  # fmt: skip


@pytest.mark.slow
def test_two_nodes_under_fsdp2_train_like_one_process(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, rendezvous: Path, one_process: Any
) -> None:
    """accelerate launch with the shipped fsdp2.yaml on two nodes (1 rank each): each rank holds half the
    parameter elements, the loss curve is one process's, the saved (gathered) model loads and equals
    one process's within WEIGHT_TOLERANCE."""
    from transformers import AutoModelForCausalLM

    shipped = str(ROOT / "infra" / "accelerate" / "fsdp2.yaml")
    config = _config(tiny_model, max_steps=12, accelerate_config=shipped, num_processes=1, nodes=2)
    assert config.launcher == "auto"  # on several nodes: accelerate launch
    out = tmp_path / "fsdp2"
    two, two_s = _two_nodes(config, sft_rows, out, tmp_path / "agent.log")
    lines = _ranks(out)
    assert sorted(lines) == [0, 1] and len({pid for _, pid, _, _ in lines.values()}) == 2
    text = (out / LOG_FILE).read_text() + (out / "train.node1.log").read_text()
    shards = {int(r): (int(h), int(t)) for r, w, h, t, _ in SHARD_LINE.findall(text) if w == "fsdp2"}
    assert sorted(shards) == [0, 1] and shards[0][0] + shards[1][0] <= shards[0][1] + 2
    assert two["global_step"] == two["steps_run"] == 12 and two["tokens_seen"] == one_process.tokens_seen
    gaps = [abs(a - b) for (_, a), (_, b) in zip(one_process.loss_curve, two["loss_curve"], strict=True)]
    assert max(gaps) < LOSS_TOLERANCE
    loaded = AutoModelForCausalLM.from_pretrained(out / "model").state_dict()
    reference = AutoModelForCausalLM.from_pretrained(one_process.model_dir).state_dict()
    weight_gap = max(float((loaded[k] - reference[k]).abs().max()) for k in reference)
    assert weight_gap < WEIGHT_TOLERANCE
    print(f"\n2 nodes (FSDP2): {two_s:.1f} s, losses {[round(v, 6) for _, v in two['loss_curve']]}, "
          f"largest loss gap {max(gaps):.2e}, largest weight gap {weight_gap:.2e}")  # fmt: skip


def test_the_launch_commands_and_what_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each node's command line; the environment's gaps and a launcher that cannot span nodes refused
    with what to set."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv(nodes.ENDPOINT_ENV, raising=False)
    with pytest.raises(nodes.NodesError, match="set COA_RDZV_ENDPOINT=host:port"):
        nodes.rendezvous()
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.5")
    monkeypatch.setenv("MASTER_PORT", "29400")
    monkeypatch.delenv(nodes.NODES_DIR_ENV, raising=False)
    with pytest.raises(nodes.NodesError, match="needs COA_NODES_DIR"):
        nodes.rendezvous()
    monkeypatch.setenv(nodes.NODES_DIR_ENV, str(tmp_path))
    planned = nodes.plan("torchrun", 4, 8, None, tmp_path)
    cmd = " ".join(planned.command(3))
    assert "--nnodes 4 --node-rank 3 --nproc-per-node 8 --master-addr 10.0.0.5 --master-port 29400" in cmd
    assert "--max-restarts 0" in cmd
    acc = nodes.plan("accelerate", 2, 8, "infra/accelerate/fsdp2.yaml", tmp_path).command(1)
    assert " ".join(acc).endswith(
        "--num_processes 16 --num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.5 "
        "--main_process_port 29400 --rdzv_conf timeout=600 --max_restarts 0"
    )
    with pytest.raises(nodes.NodesError, match="outside this launch's 4 nodes"):
        planned.command(4)
    for name in nodes.NODE_RANK_ENVS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(nodes.NodesError, match="no node rank"):
        nodes.node_rank()
    monkeypatch.setenv("SLURM_NODEID", "2")
    assert nodes.node_rank() == 2
    with pytest.raises(ValueError, match="nodes is 2 but launcher is in_process"):
        SFTStageConfig(max_steps=1, nodes=2, launcher="in_process")
    monkeypatch.delenv(nodes.NODES_DIR_ENV)
    stage = SFTStageConfig(max_steps=1, nodes=2, launcher="torchrun")
    with pytest.raises(SFTError, match=r"sft.nodes is 2: .*needs COA_NODES_DIR"):
        launch(SFT, None, None, tmp_path, stage)
