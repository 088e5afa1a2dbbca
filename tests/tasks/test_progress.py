"""A step's live progress in the Prefect UI (:mod:`tasks.progress`), against a real Prefect server
(the test harness's): the progress artifact moves at a bounded rate with the time left and the live
figures, ends at 100%, and a collection's and an evaluation's move from 0 to 100% while they run, read
back from the API from another thread, with ``planned`` equal to the runs (episodes) the step planned.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort
from prefect.testing.utilities import prefect_test_harness

import schemas
from coa import io
from coa.collect import step as collect_step
from coa.collect.config import CollectConfig
from coa.progress import LiveMetrics
from coa.steps import TableInput
from tasks import progress as live
from tasks.run_step import run_step_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=120):
        yield


def _artifacts(key: str) -> list[Any]:
    with get_client(sync_client=True) as client:
        return list(
            client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                sort=ArtifactSort.CREATED_DESC,
            )
        )


def test_progress_moves_at_a_bounded_rate_and_ends_at_100(server: None) -> None:
    now = [0.0]
    seen: dict[str, Any] = {}

    @flow
    def run() -> None:
        progress = live.StepProgress(
            "sft", "unit", get_run_logger(), clock=lambda: now[0], table_every_s=2.01
        ).start()
        assert isinstance(progress, LiveMetrics)
        (start,) = _artifacts("unit-sft-progress")
        seen["start"] = (start.data, start.description)
        for done in range(1, 101):  # 100 steps, 0.05 s apart: 5 s
            now[0] += 0.05
            progress.metrics({"loss": 3.0 - done / 100, "tokens_per_s": 1234.5})
            progress(done, 100)
            if done == 50:
                (mid,) = _artifacts("unit-sft-progress")
                seen["mid"] = (mid.data, mid.description)
        progress.finish(reused=False)

    run()
    assert seen["start"] == (0.0, "`sft`: started")
    assert seen["mid"][0] == 41.0  # moved at most once a second: at steps 1, 21, 41 (not 50)
    assert (
        seen["mid"][1]
        == "`sft`: 41 of 100 planned (41%), loss 2.59, 1,234 tokens/s, 0:02 elapsed, ~0:03 left"
    )
    (end,) = _artifacts("unit-sft-progress")
    built = "`sft`: built: 100 of 100 planned (100%), loss 2, 1,234 tokens/s, 0:05 elapsed"
    assert end.data == 100.0 and end.description == built
    tables = _artifacts("unit-sft-live")
    assert len(tables) == 3  # after 2.01 s, 2.01 s later, and at the end: never more often
    rows = json.loads(tables[0].data)  # a table artifact's rows, as the API returns them
    assert [r["done"] for r in rows] == [41, 82, 100]
    assert rows[-1]["loss"] == 2.0 and rows[-1]["tokens_per_s"] == 1234.5
    assert rows[0]["elapsed"] == "0:02" and rows[0]["eta"] == "0:03" and rows[-1]["eta"] == ""


def test_a_collection_steps_progress_moves_from_0_to_100_while_it_runs(
    server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.synthetic import SyntheticConfig, encyclopedia_table, generate_all

    monkeypatch.setattr(live, "PROGRESS_EVERY_S", 0.0)  # every report moves it: the poll sees the way
    tasks = generate_all(SyntheticConfig(train={"arithmetic": 24, "multihop": 24}, heldout={}))["train"]
    store = io.Store()
    writer = store.writer("tasks", "progress", {"n": tasks.num_rows})
    writer.write_table("train", tasks, schemas.TASK)
    writer.write_table("encyclopedia", encyclopedia_table(), schemas.DOCUMENT)  # what the search serves
    config = CollectConfig(tools={"record": "off"}, concurrency=2)  # type: ignore[arg-type]
    ref = writer.commit()
    step = collect_step.step(config, TableInput(ref, "train"), encyclopedia=TableInput(ref, "encyclopedia"))

    result = _watched(step, "live-collect-progress", tasks.num_rows)
    assert result.ref.rows("trajectories") == tasks.num_rows


def _watched(step: Any, key: str, planned: int) -> Any:
    """Run ``step`` through the step task in a flow on another thread while this one polls its
    progress artifact; check it moved from below 100 through the middle to 100 with ``planned``."""

    @flow
    def run() -> Any:
        return run_step_task(step, {}, True, scope="live")

    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(run()))
    worker.start()
    seen: list[float] = []
    while worker.is_alive():
        found = _artifacts(key)
        if found and (not seen or seen[-1] != found[0].data):
            seen.append(found[0].data)
        time.sleep(0.02)
    worker.join()
    (end,) = _artifacts(key)
    assert end.data == 100.0 and f"built: {planned} of {planned} planned" in end.description
    assert seen[0] < 100.0 and any(0.0 < v < 100.0 for v in seen), seen
    assert seen == sorted(seen)
    assert result
    return result[0]


def test_an_evaluations_progress_moves_from_0_to_100_while_it_runs(
    server: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from coa.evaluate import step as eval_step
    from coa.evaluate.config import EvalConfig
    from coa.model import init_model, sft_corpus
    from coa.steps import ModelInput
    from coa.synthetic import encyclopedia_table
    from coa.tools.config import ToolsConfig
    from tests.evaluate.test_inference import task, tasks_table
    from tests.train.conftest import TINY
    from tests.train.rows import arith_rows

    monkeypatch.setattr(live, "PROGRESS_EVERY_S", 0.0)
    model = init_model(sft_corpus(arith_rows(40, seed=0)), TINY, tmp_path / "tiny")
    writer = io.Store().writer("tasks", "progress", {"eval": 1})
    questions = [task(i, f"What is {i} + {i}?") for i in range(40)]  # long enough to be seen midway
    writer.write_table("heldout", tasks_table(*questions), schemas.TASK)
    writer.write_table("encyclopedia", encyclopedia_table(0, 60), schemas.DOCUMENT)  # what the search serves
    ref = writer.commit()
    config = EvalConfig(
        max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief", batch_size=1
    )
    tools = ToolsConfig(enabled=("web_search",), record="off")
    step = eval_step.step(
        config,
        tools,
        TableInput(ref, "heldout"),
        ModelInput(external=str(model)),
        encyclopedia=TableInput(ref, "encyclopedia"),
    )
    result = _watched(step, "live-evaluate-progress", len(questions))
    assert result.ref.rows("eval") == len(questions)
