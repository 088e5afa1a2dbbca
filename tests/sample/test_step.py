"""The sample step's own checks (its two-round run is ``test_rounds_run.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import schemas
from coa import io
from coa.llm.preflight import EndpointUnusable
from coa.sample import step as sample_step
from coa.sample.config import SampleConfig
from coa.steps import ModelInput, TableInput, run_step
from coa.tools.config import ToolsConfig
from tests.test_collect_failfast import closed_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_dead_search_endpoint_fails_sampling_in_seconds_before_the_model_loads(tmp_path: Path) -> None:
    """Sampling calls the evaluation's tools: their search endpoint is checked before the model is
    loaded or any episode runs (exit 3 within seconds, naming ``evaluate.tools``)."""
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("tasks", "coa", {"test": 1})
    writer.write_table("tasks", pq.read_table(FIXTURES / "tasks.parquet"), schemas.TASK)
    tasks = writer.commit()
    url = f"http://127.0.0.1:{closed_port()}"
    search = {"provider": "retrieve", "retrieve": {"url": f"{url}/retrieve", "max_retries": 4}}
    tools = ToolsConfig.model_validate({"enabled": ["web_search"], "search": search, "record": "off"})
    config = SampleConfig(prompt_style="brief", variants={})
    model = ModelInput(external=str(tmp_path / "no-model-is-loaded"))
    step = sample_step.step(config, tools, model, TableInput(tasks, "tasks"), 1)
    t0 = time.monotonic()
    with pytest.raises(
        EndpointUnusable, match=r"retrieve search endpoint .* fix evaluate\.tools\.search\.retrieve "
    ):
        run_step(step, store)
    assert time.monotonic() - t0 < 10
