"""Golden outputs: the resolved profiles and the convert stage on in-repo teacher runs.

The fixtures (``tests/fixtures/``) are three offline-teacher runs (math with code, multi-hop with
search, programming) and their tasks, so these tests need nothing outside the repository.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import schemas
from coa.convert.config import ConvertConfig
from coa.convert.core import rl_prompts, sft_examples
from coa.plan import PipelineConfig, load_pipeline_config

from .golden import FIXTURES, check

REPO = Path(__file__).resolve().parents[1]
PROFILES = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_resolved_profiles(profile: Path) -> None:
    config = load_pipeline_config(profile)
    check(f"configs/{profile.stem}.json", config.model_dump(mode="json", context={"resolved": True}))
    # the plain dump writes the slots' names back (no declaration written twice) and loads back equal
    assert PipelineConfig.model_validate(config.model_dump(mode="json")) == config


def test_convert_output() -> None:
    runs = schemas.TRAJECTORY.conform(pq.read_table(FIXTURES / "trajectories.parquet")).to_pylist()
    tasks = schemas.TASK.conform(pq.read_table(FIXTURES / "tasks.parquet"))
    config = ConvertConfig(prompt_style="brief")
    examples, rejected = sft_examples(runs, config, "fixture")
    assert rejected == [] and len(examples) == 3
    stats = {r["task_id"]: [1, int(bool(r["correct"]))] for r in runs}
    prompts, skipped = rl_prompts(tasks, stats, config, "fixture")
    assert skipped == []
    check("convert/sft_examples.json", examples)
    check("convert/rl_prompts.json", prompts)
