"""Real teacher runs (offline backend, real tools) shared by the convert tests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coa.collect.config import CollectConfig
from coa.collect.teacher import open_teacher
from coa.synthetic import SyntheticConfig, generate_all


@pytest.fixture(scope="session")
def synthetic_tasks() -> dict[str, Any]:
    cfg = SyntheticConfig(
        train={"arithmetic": 8, "multihop": 8, "programming": 4}, heldout={"arithmetic": 1, "multihop": 1}
    )
    return generate_all(cfg)


@pytest.fixture(scope="session")
def teacher_runs(synthetic_tasks: dict[str, Any]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        config = CollectConfig(tools={"record": "off"})  # type: ignore[arg-type]
        async with open_teacher(config, None) as teacher:
            return list(
                await asyncio.gather(*(teacher.solve(t) for t in synthetic_tasks["train"].to_pylist()))
            )

    return asyncio.run(run())
