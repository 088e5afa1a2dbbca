"""Nightly retraining on the GPU pool, end to end: a real Prefect server, ``cpu`` and ``gpu`` process
pools with one worker each, ``dispatch.mode: deployment``, two nights.

Night 1 trains (SFT, then RL on the family ``evaluate.sft`` picks) and promotes its candidate. Night 2's
SFT starts from night 1's champion and its RL reads night 2's ``evaluate.sft``: both are dispatched to
the gpu worker as step specs, which it rebuilds without planning. The lineage of each trained model
names the process that built it: the gpu worker's flow-run process, not the nightly flow's.

A step that fails on the gpu pool (curation's gate) is ``test_failed_step.py``'s (the nightly flow
fails through the same ``flows.pipeline.fail``); a gpu worker killed mid-SFT, retried and resumed to
the same weights, ``test_worker_killed.py``'s.
"""

from __future__ import annotations

import json
import subprocess
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


def _artifact(arts: list[dict[str, Any]], key: str, flow_run: str) -> dict[str, Any]:
    return next(a for a in arts if a["key"] == key and a["flow_run_id"] == flow_run)


def test_two_nights_on_the_gpu_pool(prefect_env: dict[str, str], tmp_path: Path, storage_root: Path) -> None:  # noqa: F811
    env = prefect_env
    _deploy(env)
    logs = {pool: tmp_path / f"{pool}-worker.log" for pool in ("cpu", "gpu")}
    workers = [_start([str(BIN / "prefect"), "worker", "start", "--pool", p], env, logs[p]) for p in logs]
    try:
        for night in TRAIN:
            out = _night(env, night, [TRAIN[night], *NIGHT])
            assert out.returncode == 0, out.stdout + "".join(log.read_text()[-3000:] for log in logs.values())
    finally:
        for worker in workers:
            _stop(worker)

    flows = {f["id"]: f["name"] for f in _post(env, "flows/filter")}
    runs = _post(env, "flow_runs/filter")
    nights = {r["parameters"]["night"]: r for r in runs if flows[r["flow_id"]] == "nightly"}
    assert {n: r["name"] for n, r in nights.items()} == {n: f"nightly-demo-{n}" for n in TRAIN}
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
            assert child["name"] == f"{run['name']}/{name}" and child["parent_task_run_id"]
            assert child["id"] in logs["gpu"].read_text() and child["id"] not in logs["cpu"].read_text()
            model = io.open_artifact(stages[night][name])
            assert child["parameters"]["spec"]["key"] == model.key  # built at the key the spec named
            built_by = io.read_lineage(model)["built_by"]
            assert str(built_by["pid"]) == str(child["infrastructure_pid"]).rsplit(":", 1)[-1], built_by
            assert str(built_by["pid"]) != str(run["infrastructure_pid"]).rsplit(":", 1)[-1]

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
    assert "synthetic" in names  # its encyclopedia: what RL's local search serves
    assert not names & {"collect", "curate", "nightly.merge", "nightly.new_tasks"}, names
