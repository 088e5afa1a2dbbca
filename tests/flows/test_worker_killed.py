"""A gpu worker killed mid-SFT, against a real Prefect server: the run completes on a restarted worker.

A parent flow (:mod:`tests.flows.dispatch_sft`) dispatches an SFT step (tiny student, launched with
torchrun: worker → flow-run process → guard → torchrun → trainer) to the ``gpu`` process pool, whose
worker this test started in a process group of its own. Once the first checkpoint is complete on disk,
the worker's process group and the flow-run process's are SIGKILLed, as a lost machine would be: no
process is left to report the child run's state, which stays Running. A fresh worker is started. The
parent's own watch (``dispatch.heartbeat_s``, ``dispatch.heartbeat_timeout_s``: short here) sees the
heartbeats stop, marks the child Crashed with the silence in its message and sends it again; the warning
names the checkpoint the retry resumes from, read from disk. The retry, on the new worker, resumes from
that checkpoint, runs the steps left (steps run = planned) and commits weights bit-equal to an
uninterrupted run of the same config. No process of the killed machine survives (the trainer's group
is ended by its guard, :mod:`coa.kit.guard`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import schemas
from coa import io

from .test_deployment import BIN, REPO, _start, _stop
from .test_deployment import prefect_env as prefect_env  # the fixture: a server on a fresh database

pytestmark = pytest.mark.slow
HEARTBEAT = ["dispatch.mode=deployment", "dispatch.heartbeat_s=0.5", "dispatch.heartbeat_timeout_s=3"]
"""Short beats for the test only (the defaults are 10 s and 60 s)."""
SFT = [
    *("sft.time_budget_s=null", "sft.max_steps=12", "sft.save_steps=4", "sft.logging_steps=1"),
    *("sft.batch_size=8", "sft.max_length=256", "sft.launcher=torchrun", "sft.num_processes=1"),
]
"""12 steps, a checkpoint every 4: the kill lands after the first checkpoint, before the end."""


def _inputs(tmp_path: Path) -> tuple[str, str]:
    """A tiny student (tokenizer trained on the rows, random weights) and a committed sft.v1 table."""
    from coa.model import init_model, sft_corpus
    from tests.train.conftest import TINY
    from tests.train.rows import arith_rows

    model = init_model(sft_corpus(arith_rows(40, seed=0)), TINY, tmp_path / "tiny")
    writer = io.Store().writer("converted", "coa", {"worker-killed": 1})
    # 96 rows: one epoch spans the 12 steps (batch 8), so whichever checkpoint the kill leaves (4, or 8
    # on a loaded machine) the resume stays in epoch 0. A resume into a later epoch does not yet draw
    # that epoch's order as the straight run did (LengthGroupedSampler takes the global RNG at the
    # epoch's start, and the checkpoint restores the RNG of a later step): docs/history.md, 2026-12-07
    writer.write_table("sft", arith_rows(96, seed=1), schemas.SFT)
    return str(model), writer.commit().uri


def _api(env: dict[str, str], path: str, body: dict[str, Any] | None = None) -> Any:
    url = f"{env['PREFECT_API_URL']}/{path}"
    reply = httpx.post(url, json=body, timeout=10) if body is not None else httpx.get(url, timeout=10)
    return reply.json()


def _lose_the_machine(worker: subprocess.Popen[bytes]) -> tuple[list[psutil.Process], list[str]]:
    """SIGKILL the worker's process group and its flow-run process's; every process it ran (to check
    that none survives) and their command lines."""
    tree = [psutil.Process(worker.pid), *psutil.Process(worker.pid).children(recursive=True)]
    ran = [" ".join(p.cmdline()) for p in tree]
    groups = {worker.pid} | {os.getpgid(p.pid) for p in psutil.Process(worker.pid).children()}
    for group in groups:
        os.killpg(group, signal.SIGKILL)
    worker.wait(timeout=10)
    return tree, ran


def _gone(tree: list[psutil.Process], within_s: float) -> list[str]:
    """The processes of ``tree`` still alive after ``within_s`` (a zombie is dead)."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for p in tree:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _weights(uri: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(Path(uri) / "model" / "model.safetensors"))


def _gpu_pool(env: dict[str, str]) -> None:
    """The ``gpu`` process pool, created through the API (what ``prefect work-pool create gpu --type
    process`` posts, without a CLI's start-up)."""
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    body = {"name": "gpu", "type": "process", "base_job_template": template}
    reply = httpx.post(f"{env['PREFECT_API_URL']}/work_pools/", json=body, timeout=10)
    assert reply.status_code == 201, reply.text


@dataclasses.dataclass(frozen=True)
class Killed:
    """What :func:`_kill_mid_sft` did and saw."""

    model: str  # the SFT's inputs: the base model's folder and the converted artifact
    data: str
    at: float  # when the kill came (epoch seconds)
    folder: Path  # the checkpoint folder of the address the SFT was building
    ran: list[str]  # the command lines of the killed machine's processes, at the kill
    survivors: list[str]  # those still alive 10 s after the kill
    uri: str  # the model the parent's retry committed


def _kill_mid_sft(env: dict[str, str], tmp_path: Path, store: Path, marks: dict[str, float]) -> Killed:
    """Deploy ``run-one-step/gpu``, start a gpu worker and the parent flow; SIGKILL the worker's machine
    once the SFT's first checkpoint is complete; start a fresh worker; wait for the parent."""
    started = time.monotonic()
    _gpu_pool(env)
    worker_cmd = [str(BIN / "prefect"), "worker", "start", "--pool", "gpu"]
    worker = _start(worker_cmd, env, tmp_path / "worker-1.log")  # it starts while the rest is set up
    parent: subprocess.Popen[bytes] | None = None
    fresh: subprocess.Popen[bytes] | None = None
    try:
        deploying = subprocess.Popen(
            [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "gpu"],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        model, data = _inputs(tmp_path)  # meanwhile
        said, _ = deploying.communicate(timeout=120)
        assert deploying.returncode == 0, f"prefect deploy --name gpu failed:\n{said}"
        marks["deployed"] = time.monotonic() - started
        parent = subprocess.Popen(
            [sys.executable, "-m", "tests.flows.dispatch_sft", model, data, json.dumps([*SFT, *HEARTBEAT])],
            env=env, cwd=REPO, stdout=(tmp_path / "parent.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        pattern = "checkpoints/model/*/checkpoints/checkpoint-*/trainer_state.json"
        while not (states := list(store.glob(pattern))):
            assert parent.poll() is None, (tmp_path / "parent.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "worker-1.log").read_text()[-3000:]
            time.sleep(0.02)
        killed_at, marks["killed"] = time.time(), time.monotonic() - started
        tree, ran = _lose_the_machine(worker)
        folder = states[0].parents[2]  # the address the SFT was building
        assert not (store / "model" / folder.name / io.MANIFEST).exists(), "committed before the kill"
        fresh = _start(worker_cmd, env, tmp_path / "worker-2.log")  # the machine comes back
        survivors = _gone(tree, within_s=10)  # the trainer's guard ends its group (3 s grace)
        assert parent.wait(timeout=180) == 0, (tmp_path / "parent.log").read_text()[-3000:]
        marks["committed"] = time.monotonic() - started
    finally:
        if parent is not None and parent.poll() is None:
            parent.kill()
        for proc in (worker, fresh):
            if proc is not None:
                _stop(proc)
    uri = (tmp_path / "parent.log").read_text().rsplit("model: ", 1)[1].split()[0]
    return Killed(model, data, killed_at, folder, ran, survivors, uri)


def test_a_gpu_worker_killed_mid_sft_is_recovered_on_a_restarted_worker(
    prefect_env: dict[str, str], tmp_path: Path, storage_root: Path
) -> None:
    env, marks = prefect_env, {"start": time.monotonic()}
    killed = _kill_mid_sft(env, tmp_path, storage_root, marks)
    folder, uri = killed.folder, killed.uri
    trained = [c for c in killed.ran if "-m coa.train.sft" in c and "torch.distributed.run" not in c]
    assert any("coa.kit.guard" in c for c in killed.ran) and trained, killed.ran  # killed mid-SFT
    assert killed.survivors == [], killed.survivors  # worker, flow-run process, guard, torchrun, trainer

    runs = {r["name"]: r for r in _api(env, "flow_runs/filter", {})}
    child, retry = runs["dispatch-sft/sft"], runs["dispatch-sft/sft/retry-1"]
    crashed = child["state"]  # set by the parent's watch: nobody else was left to report it
    assert child["state_type"] == "CRASHED" and "no heartbeat for" in crashed["message"], crashed
    assert "Crashed by the flow run that dispatched it" in crashed["message"]
    detected_s = _seconds(crashed["timestamp"]) - killed.at
    # the lease (3 s) and a few polls of the watch; seconds, not the minutes a lost lease would take,
    # with room for a loaded 2-core machine (the parallel tier beside mypy)
    assert detected_s < 3 + 10, f"the watch took {detected_s:.1f} s to see the worker dead"
    assert retry["state_type"] == "COMPLETED" and retry["work_pool_name"] == "gpu", retry["state"]
    assert retry["id"] in (tmp_path / "worker-2.log").read_text()  # built by the restarted worker

    logs = _api(env, "logs/filter", {"logs": {"flow_run_id": {"any_": [runs["dispatch-sft"]["id"]]}}})
    said = " ".join(" ".join(log["message"].split()) for log in logs)
    assert "sft: flow run dispatch-sft/sft crashed (no heartbeat for" in said, said[-2000:]
    named = said.split("retry 1 of 2: it resumes from checkpoint ", 1)[1].split(" ", 1)[0]
    assert f"({folder}/checkpoints/checkpoint-{named})" in said, said[-2000:]

    result = json.loads(io.read_file(uri, "sft_result.json"))
    assert Path(uri).name == folder.name  # committed at the key the killed run was building
    assert result["start_step"] == int(named) >= 4, result  # resumed from the checkpoint it named
    assert result["start_step"] + result["steps_run"] == result["steps_planned"] == 12, result

    from coa.steps import run_step
    from tests.flows.dispatch_sft import sft_of

    step, _ = sft_of(killed.model, killed.data, [*SFT, *HEARTBEAT])
    straight = run_step(step, io.Store(str(tmp_path / "uninterrupted")))  # the same config, never killed
    assert Path(straight.ref.uri).name == folder.name  # the same key
    a, b = _weights(uri), _weights(straight.ref.uri)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)  # bit-equal on CPU
    marks["reference"] = time.monotonic() - marks.pop("start")
    phases = ", ".join(f"{name} {t:.0f} s" for name, t in marks.items())
    print(f"resumed from checkpoint {named}; dead worker seen in {detected_s:.1f} s; at: {phases}")


def _seconds(timestamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
