"""What the how-to pages state about the deployments and the nightly profile is what the repository
holds (``docs/how-to/gpu-pools.md`` named a deployment that does not exist, ``nightly.md`` said the
nightly profile has no RL section when it has one)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _deployments() -> set[str]:
    """``flow/deployment`` of every deployment in prefect.yaml (the flow name from its decorator)."""
    out = set()
    for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]:
        module, func = d["entrypoint"].split(":")
        source = (ROOT / module).read_text()
        flow = re.search(rf'@flow\(name="([^"]+)"[^\n]*\)\n(?:@[^\n]+\n)*def {func}\b', source)
        assert flow is not None, d["entrypoint"]
        out.add(f"{flow.group(1)}/{d['name']}")
    return out


def test_the_deployments_the_gpu_pools_page_names_exist() -> None:
    text = (ROOT / "docs/how-to/gpu-pools.md").read_text()
    flows = {"pipeline", "nightly", "run-one-step"}
    named = {n for n in re.findall(r"`([a-z-]+/[a-z-]+)`", text) if n.split("/")[0] in flows}
    assert named and named <= _deployments(), named - _deployments()


def test_the_nightly_page_says_whether_the_profile_trains_rl() -> None:
    text = " ".join((ROOT / "docs/how-to/nightly.md").read_text().split())
    has_rl = "rl" in yaml.safe_load((ROOT / "configs/nightly.yaml").read_text())
    assert ("`configs/nightly.yaml` has one" in text) == has_rl
    assert ("has none yet" in text) == (not has_rl)
