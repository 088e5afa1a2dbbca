"""Nightly retraining on the GPU pool, end to end: a real Prefect server, ``cpu`` and ``gpu`` process
pools with one worker each, ``dispatch.mode: deployment``, two nights.

Night 1 trains (SFT, then RL on the family ``evaluate.sft`` picks) and promotes its candidate. Night 2's
SFT starts from night 1's champion and its RL reads night 2's ``evaluate.sft``: both are dispatched to
the gpu worker as step specs, which it rebuilds without planning. The lineage of each trained model
names the process that built it: the gpu worker's flow-run process, not the nightly flow's. Night 3
dispatches curation, whose gate cannot pass: the night fails with curation's own one-line reason.

In night 1 the gpu worker's process building its SFT is SIGKILLed right after a checkpoint: the
child run is Crashed, the nightly flow sends the step again (``tasks/dispatch.py``, a bounded number
of times) with a warning naming the checkpoint it resumes from (read from disk), and the retry
resumes the SFT from that checkpoint, runs the steps left (steps run = planned) and commits at the
key the killed run was building; the night completes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from coa import io
from coa.registry.store import Registry

from .test_deployment import BIN, REPO, _deploy, _start, _stop, prefect_env  # noqa: F401  (fixture)
from .test_pipeline_flow import TINY_TRAINING

pytestmark = pytest.mark.slow
NIGHT = [
    "synthetic.heldout={arithmetic: 2, multihop: 2, programming: 1}",
    "curate.gate.correctness_floor=0.3",
    "promotion={model_name: agent, sft_from: champion, gate: {bootstrap_samples: 200}}",
    *TINY_TRAINING,
    "rl.families=auto",  # RL reads the SFT model's evaluation (evaluate.sft), as configs/nightly.yaml
    "dispatch.mode=deployment",
]
TRAIN = {
    "2026-01-01": "synthetic.train={arithmetic: 6, multihop: 6, programming: 3}",
    "2026-01-02": "synthetic.train={arithmetic: 12, multihop: 12, programming: 6}",
}

KILL_WINDOW = ["sft.max_steps=40"]
"""Night 1's SFT (the kill lands in it after a checkpoint; its rerun resumes): 40 steps, so a fast
machine is still training when the kill comes (checkpoints every 2 steps)."""


FAILING = [  # night 3: curation dispatched to the gpu pool, where its gate cannot pass
    "synthetic.train={arithmetic: 14, multihop: 14, programming: 7}",
    *NIGHT,
    "curate.gate.correctness_floor=1.0",
    "curate.filters.require_correct=false",
    "collect.offline.slip_rate=0.5",
    "dispatch.gpu_steps=[curate]",
]


def _night(env: dict[str, str], night: str, overrides: list[str]) -> subprocess.CompletedProcess[str]:
    command = [
        str(BIN / "prefect"), "deployment", "run", "nightly/nightly",
        "--param", "config_path=configs/demo.yaml",
        "--param", f"overrides={json.dumps(overrides)}",
        "--param", f"night={night}",
        "--watch", "--watch-timeout", "420",
    ]  # fmt: skip
    wide = {**env, "COLUMNS": "240"}  # the watch's console would wrap the reason at 80
    return subprocess.run(command, env=wide, cwd=REPO, capture_output=True, text=True, timeout=480)


def _post(env: dict[str, str], path: str, body: dict[str, Any] | None = None) -> Any:
    return httpx.post(f"{env['PREFECT_API_URL']}/{path}", json=body or {}, timeout=10).json()


def _night_with_sft_killed(
    env: dict[str, str], night: str, overrides: list[str], store: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str, float]:
    """Run ``night``; once its SFT (dispatched to the gpu worker) has written a checkpoint, SIGKILL the
    worker's process that builds it. Returns what ``--watch`` printed, the killed child flow run, the
    folder the SFT was building and the seconds from the kill to the end of the night."""
    command = [
        str(BIN / "prefect"), "deployment", "run", "nightly/nightly",
        "--param", "config_path=configs/demo.yaml",
        "--param", f"overrides={json.dumps(overrides)}",
        "--param", f"night={night}",
        "--watch", "--watch-timeout", "600",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env={**env, "COLUMNS": "240"}, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 420
        states: list[Path] = []
        while not states:
            if proc.poll() is not None:  # what --watch printed says why (a step's one-line failure)
                said = proc.stdout.read()[-4000:] if proc.stdout else ""
                raise AssertionError(f"the night ended before its SFT wrote a checkpoint:\n{said}")
            assert time.monotonic() < deadline, "no SFT checkpoint within 420 s"
            time.sleep(0.02)
            states = list(store.glob("checkpoints/model/*/checkpoints/checkpoint-*/trainer_state.json"))
        name = f"nightly-demo-{night}/sft"
        child = _post(env, "flow_runs/filter", {"flow_runs": {"name": {"any_": [name]}}})[0]
        os.kill(int(str(child["infrastructure_pid"]).rsplit(":", 1)[-1]), signal.SIGKILL)
        killed = time.monotonic()
        folder = states[0].parents[2].name  # the address the SFT was building
        assert not (store / "model" / folder / io.MANIFEST).exists(), "the SFT committed before the kill"
        out, _ = proc.communicate(timeout=600)  # the retry, then the rest of the night
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    done = subprocess.CompletedProcess(command, proc.returncode, out, "")
    child = httpx.get(f"{env['PREFECT_API_URL']}/flow_runs/{child['id']}", timeout=10).json()
    return done, child, folder, time.monotonic() - killed


def _check_killed_night(
    env: dict[str, str],
    out: subprocess.CompletedProcess[str],
    run: dict[str, Any],
    child: dict[str, Any],
    runs: list[dict[str, Any]],
) -> None:
    """A gpu worker's process killed mid-step: the child run is Crashed, the night sends the step again
    with a warning naming the checkpoint it resumes from, the retry completes and so does the night."""
    assert child["state_type"] == "CRASHED", child["state"]
    assert out.returncode == 0 and run["state_type"] == "COMPLETED", out.stdout[-3000:]
    retry = next(r for r in runs if r["name"] == f"{child['name']}/retry-1")
    assert retry["state_type"] == "COMPLETED" and retry["work_pool_name"] == "gpu", retry["state"]
    logs = _post(env, "logs/filter", {"logs": {"flow_run_id": {"any_": [run["id"]]}}})
    said = " ".join(" ".join(log["message"].split()) for log in logs)
    assert f"flow run {child['name']} crashed" in said, said[-3000:]
    assert "retry 1 of 2: it resumes from checkpoint " in said and "/checkpoints/checkpoint-" in said


def _check_failed_night(
    out: subprocess.CompletedProcess[str], run: dict[str, Any], runs: list[dict[str, Any]]
) -> None:
    """A step that fails on the gpu pool fails the night with the step's own reason: as the flow
    run's state message and in what ``--watch`` prints; no "infrastructure error"."""
    reason = "curate: check failed: curation gate failed"
    printed = " ".join(out.stdout.split())  # what --watch printed: the reason, then the final state
    assert out.returncode == 1 and f"coa.step.failed * {reason}" in printed, out.stdout[-3000:]
    assert run["state_type"] == "FAILED" and run["state"]["message"].startswith(reason), run["state"]
    child = next(r for r in runs if r["name"] == f"{run['name']}/curate")
    assert child["work_pool_name"] == "gpu" and child["state"]["message"].startswith("check failed:")
    assert "infrastructure error" not in out.stdout + run["state"]["message"]


def _artifact(arts: list[dict[str, Any]], key: str, flow_run: str) -> dict[str, Any]:
    return next(a for a in arts if a["key"] == key and a["flow_run_id"] == flow_run)


def test_two_nights_on_the_gpu_pool(prefect_env: dict[str, str], tmp_path: Path, storage_root: Path) -> None:  # noqa: F811
    env = prefect_env
    _deploy(env)
    logs = {pool: tmp_path / f"{pool}-worker.log" for pool in ("cpu", "gpu")}
    workers = [_start([str(BIN / "prefect"), "worker", "start", "--pool", p], env, logs[p]) for p in logs]
    night1 = next(iter(TRAIN))
    try:
        killed_out, crashed, killed_at, _ = _night_with_sft_killed(
            env, night1, [TRAIN[night1], *NIGHT, *KILL_WINDOW], storage_root
        )
        for night in list(TRAIN)[1:]:  # night 1 completed through the retry of its killed SFT
            out = _night(env, night, [TRAIN[night], *NIGHT])
            assert out.returncode == 0, out.stdout + "".join(log.read_text()[-3000:] for log in logs.values())
        failed = _night(env, "2026-01-03", FAILING)
    finally:
        for worker in workers:
            _stop(worker)

    flows = {f["id"]: f["name"] for f in _post(env, "flows/filter")}
    runs = _post(env, "flow_runs/filter")
    killed_run = next(
        r for r in runs if flows[r["flow_id"]] == "nightly" and r["parameters"]["night"] == night1
    )  # fmt: skip
    _check_killed_night(env, killed_out, killed_run, crashed, runs)
    retried = f"{crashed['name']}/retry-1"
    runs = [r for r in runs if r["id"] != crashed["id"]]  # the crashed child: checked above
    nights = {r["parameters"]["night"]: r for r in runs if flows[r["flow_id"]] == "nightly"}
    assert {n: r["name"] for n, r in nights.items()} == {
        n: f"nightly-demo-{n}" for n in [*TRAIN, "2026-01-03"]
    }
    _check_failed_night(failed, nights.pop("2026-01-03"), runs)
    arts = _post(env, "artifacts/filter")
    stages: dict[str, dict[str, str]] = {}
    for night, run in nights.items():
        assert run["state_type"] == "COMPLETED" and run["work_pool_name"] == "cpu"
        table = next(
            a for a in arts if a["key"] == "nightly-demo-row-counts" and a["flow_run_id"] == run["id"]
        )
        rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
        stages[night] = {r["stage"]: r["artifact"] for r in rows if r["artifact"]}
        children = {
            r["parameters"]["spec"]["name"]: r
            for r in runs
            if flows[r["flow_id"]] == "run-one-step" and r["name"].startswith(run["name"] + "/")
        }
        assert set(children) == {"sft", "rl"}  # dispatch.gpu_steps; nothing else left the cpu pool
        for name, child in children.items():
            assert child["state_type"] == "COMPLETED" and child["work_pool_name"] == "gpu"
            assert child["name"] in (f"{run['name']}/{name}", retried) and child["parent_task_run_id"]
            assert child["id"] in logs["gpu"].read_text() and child["id"] not in logs["cpu"].read_text()
            model = io.open_artifact(stages[night][name])
            assert child["parameters"]["spec"]["key"] == model.key  # built at the key the spec named
            built_by = io.read_lineage(model)["built_by"]
            assert str(built_by["pid"]) == str(child["infrastructure_pid"]).rsplit(":", 1)[-1], built_by
            assert str(built_by["pid"]) != str(run["infrastructure_pid"]).rsplit(":", 1)[-1]

    # night 1's retry resumed the killed SFT from its checkpoint, at the key the killed run was building
    sft1 = json.loads(io.read_file(stages[night1]["sft"], "sft_result.json"))
    assert Path(stages[night1]["sft"]).name == killed_at, (stages[night1]["sft"], killed_at)
    assert sft1["start_step"] >= 2 and sft1["start_step"] + sft1["steps_run"] == sft1["steps_planned"] == 40

    first, second = stages["2026-01-01"], stages["2026-01-02"]
    history = Registry().history("agent")
    assert history[0].event == "promote" and history[0].model_uri == first["rl"]  # night 1 promoted RL
    sft2 = io.read_lineage(second["sft"])
    assert sft2["base_model"] == first["rl"] and sft2["inputs"]["base"]["uri"] == first["rl"]
    rl2 = io.read_lineage(second["rl"])
    assert rl2["inputs"]["evaluation"]["uri"] == second["evaluate.sft"]
    assert io.read_lineage(second["evaluate.sft"])["inputs"]["model"]["uri"] == second["sft"]
    gate = next(
        a for a in arts if a["key"] == "nightly-demo-gate" and a["flow_run_id"] == nights["2026-01-02"]["id"]
    )
    assert ("**PASS**" in gate["data"] or "**FAIL**" in gate["data"]) and "✅" not in gate["data"]

    # the run graph: the dispatched step's node reads only its own upstream steps
    tasks = _post(env, "task_runs/filter", {"flow_runs": {"id": {"any_": [nights["2026-01-02"]["id"]]}}})
    by_id = {t["id"]: t for t in tasks}
    rl_child = next(r for r in runs if r["name"] == "nightly-demo-2026-01-02/rl")
    sft_child = next(r for r in runs if r["name"] == "nightly-demo-2026-01-02/sft")
    node = by_id[rl_child["parent_task_run_id"]]
    upstream = {i["id"] for inputs in node["task_inputs"].values() for i in inputs}
    names = {by_id[i]["name"] for i in upstream if i in by_id}
    assert sft_child["parent_task_run_id"] in upstream and {"convert", "evaluate.sft"} <= names, names
    assert not names & {"synthetic", "collect", "curate", "nightly.merge", "nightly.new_tasks"}, names
