"""The pipeline flow in process (ephemeral Prefect): stages run, artifacts published, reruns reuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from coa import io

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prefect_harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_pipeline_runs_built_stages_and_reports_the_rest(
    prefect_harness: None, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.pipeline import NOT_BUILT, pipeline

    monkeypatch.chdir(REPO)
    result = pipeline(config_path="configs/demo.yaml", overrides=["tasks.sources.0.limit=5"])
    stages = {s["stage"]: s for s in result["stages"]}
    assert stages["tasks"]["rows"] == 5 and stages["tasks"]["status"] == "done"
    assert all(stages[name]["status"] == "not built yet" for name in NOT_BUILT)
    uri = stages["tasks"]["artifact"]
    assert uri.startswith(str(storage_root))
    assert io.read_table(uri).num_rows == 5
    lineage = io.read_lineage(uri)
    assert lineage["config"]["stage"]["sources"][0]["limit"] == 5

    again = pipeline(config_path="configs/demo.yaml", overrides=["tasks.sources.0.limit=5"])
    assert again["tasks"]["uri"] == uri  # same inputs: the committed artifact is reused
    assert io.read_lineage(uri)["created_at"] == lineage["created_at"]

    more = pipeline(config_path="configs/demo.yaml", overrides=["tasks.sources.0.limit=7"])
    assert more["tasks"]["uri"] != uri and more["stages"][0]["rows"] == 7
