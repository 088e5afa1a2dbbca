"""The parent flow of ``tests/flows/test_worker_killed.py``: it dispatches one SFT step to the gpu pool's
``run-one-step/gpu`` deployment through :func:`tasks.dispatch.run_on_pool`, as the pipeline's flow
dispatches its SFT, and prints the committed model's URI (``model: URI``) or the step's one-line
failure. Run against a Prefect server (``PREFECT_API_URL``), from the repository root::

    python -m tests.flows.dispatch_sft MODEL_FOLDER CONVERTED_URI '["sft.max_steps=40", ...]'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prefect import flow

from coa import io
from coa.plan import load_pipeline_config
from coa.plan.config import DispatchConfig
from coa.steps import ModelInput, Step, TableInput
from coa.train import step as sft_step
from tasks.dispatch import run_on_pool

PROFILE = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"


def sft_of(model: str, data: str, overrides: list[str]) -> tuple[Step, DispatchConfig]:
    """The SFT step of the demo profile with ``overrides``, training ``model`` on ``data``'s sft table,
    and the profile's dispatch config."""
    cfg = load_pipeline_config(PROFILE, overrides)
    assert cfg.sft is not None
    step = sft_step.step(cfg.sft, ModelInput(external=model), TableInput(io.open_artifact(data), "sft"))
    return step, cfg.dispatch


@flow(name="dispatch-sft", flow_run_name="dispatch-sft")
def dispatch_sft(model: str, data: str, overrides: list[str]) -> str:
    """Dispatch the SFT step; its model's URI, or the reason it failed (raised)."""
    step, dispatch = sft_of(model, data, overrides)
    result = run_on_pool(step, {}, dispatch)
    if isinstance(result, str):
        raise RuntimeError(result)
    return result.ref.uri


if __name__ == "__main__":
    uri = dispatch_sft(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
    print(f"model: {uri}", flush=True)
