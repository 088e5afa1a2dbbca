"""The shipped plans' content keys do not move for the same config and code (a golden file).

The code version is pinned, so the golden records what the plan and the runner put into a key
(kind, artifact, config, identity, inputs, upstream keys); a refactor of how steps are declared must
leave every key as it was. An intended change rewrites it with ``COA_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coa import io
from coa.plan import load_pipeline_config, plan
from coa.plan.nightly import nightly_plan
from coa.steps import ModelInput

from ..golden import check
from .plan_keys import pinned, planned_keys

REPO = Path(__file__).resolve().parents[2]
PROFILES = ("demo", "demo-gpu", "nightly")


@pytest.mark.parametrize("profile", PROFILES)
def test_shipped_plans_keep_their_keys(profile: str, tmp_path: Path) -> None:
    config = load_pipeline_config(REPO / "configs" / f"{profile}.yaml")
    store = io.Store(str(tmp_path))
    with pinned("pinned-code-version"):
        keys = {"plan": planned_keys(plan(config), store)}
        if profile == "nightly":
            keys["night"] = planned_keys(nightly_plan(config, ModelInput(external="champion")), store)
    check(f"plan_keys/{profile}.json", keys)
