"""One run per GPU: two runs sent at once to the one-slot ``run-one-step/gpu`` deployment (its
``concurrency_limit`` in prefect.yaml) run one after the other, against a real Prefect server."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import httpx
import pytest

from coa import io
from coa.plan.spec import spec_of
from coa.synthetic import SyntheticConfig
from coa.synthetic import step as synthetic_step

from .test_deployment import BIN, _deploy, _prefect, _start, _stop
from .test_deployment import prefect_env as prefect_env  # the fixture: a server on a fresh database

pytestmark = pytest.mark.slow


def _spec(seed: int) -> str:
    config = SyntheticConfig(train={"arithmetic": 3}, heldout={"arithmetic": 1}, seed=seed)
    return spec_of(synthetic_step.step(config), {}, io.Store()).model_dump_json()


def _at(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_two_runs_on_a_one_slot_gpu_deployment_run_one_after_the_other(
    prefect_env: dict[str, str], tmp_path: Path, storage_root: Path
) -> None:
    env = prefect_env
    _deploy(env)
    api = env["PREFECT_API_URL"]
    deployments = httpx.post(f"{api}/deployments/filter", json={}, timeout=10).json()
    gpu = next(d for d in deployments if d["name"] == "gpu")
    limit = (gpu.get("global_concurrency_limit") or {}).get("limit", gpu.get("concurrency_limit"))
    assert limit == 1  # from prefect.yaml
    for seed in (1, 2):  # both sent before a worker polls: they are due at once
        _prefect(env, "deployment", "run", "run-one-step/gpu", "--param", f"spec={_spec(seed)}")
    worker = _start([str(BIN / "prefect"), "worker", "start", "--pool", "gpu"], env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 240
        while True:
            runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
            if len(runs) == 2 and all(r["state_type"] in ("COMPLETED", "FAILED", "CRASHED") for r in runs):
                break
            assert time.monotonic() < deadline, (
                [(r["name"], r["state_name"]) for r in runs],
                (tmp_path / "worker.log").read_text()[-3000:],
            )
            time.sleep(1)
    finally:
        _stop(worker)
    assert [r["state_type"] for r in runs] == ["COMPLETED", "COMPLETED"], json.dumps(runs)[:2000]
    first, second = sorted(runs, key=lambda r: _at(r["start_time"]))
    assert _at(second["start_time"]) >= _at(first["end_time"])  # never both on the GPU
    history = httpx.get(f"{api}/flow_run_states/", params={"flow_run_id": second["id"]}, timeout=10).json()
    assert "AwaitingConcurrencySlot" in {s["name"] for s in history}  # it waited for the slot


def test_the_zombie_automation_and_the_heartbeat_are_shipped() -> None:
    """The automation that Crashes a run whose worker died is valid for Prefect, and the gpu deployment
    sends the heartbeats it watches."""
    import yaml
    from prefect.events.schemas.automations import AutomationCore

    root = Path(__file__).resolve().parents[2]
    automation = AutomationCore.model_validate(
        yaml.safe_load((root / "infra/prefect/zombie-flow-runs.yaml").read_text())
    )
    assert automation.actions[0].type == "change-flow-run-state"
    deployments = yaml.safe_load((root / "prefect.yaml").read_text())["deployments"]
    gpu = next(d for d in deployments if d["name"] == "gpu")
    env = gpu["work_pool"]["job_variables"]["env"]
    within = automation.trigger.within.total_seconds()  # type: ignore[union-attr]
    assert int(env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]) * 3 <= within
    assert gpu["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
