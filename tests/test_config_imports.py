"""Loading a profile imports config, not implementation: no trainer, no Prefect, no tool, no stage's core.

A config module (``coa/*/config.py``, :mod:`coa.plan.config`) imports other configs only; a package's
implementation loads on first use (PEP 562 ``__getattr__`` in its ``__init__``). Measured in a fresh
interpreter: before this bound, loading a profile imported 165 first-party modules and 1,501 in all
(polars, pandas, matplotlib, httpx, every stage's core and step); after, 60 and 418 (pyarrow
stays: a validator reads ``schemas.task.FAMILIES``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEVER = (
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "peft",
    "datasets",
    "prefect",
    "polars",
    "pandas",
    "matplotlib",
    "httpx",
    "aiohttp",
    "fsspec",
    "s3fs",
    "openai",
    "great_expectations",
    "vllm",
)
"""Third-party packages that loading a profile must not import."""
MAX_FIRST_PARTY = 64
"""At most this many modules of coa and schemas (configs, and the packages they sit in; 63 since
schemas.document, the encyclopedia's contract, 2026-12-07; 64 since coa.plan.names, the endpoints
and tool sets a profile declares once, split out of coa.plan.config the same day)."""
IMPLEMENTATION = (
    "core",
    "step",
    "stage",
    "runs",
    "teacher",
    "engine",
    "client",
    "pipeline",
    "nightly",
    "store",
    "importer",
    "trainer",
    "sft_trainer",
    "grpo",
    "toolbox",
    "sandbox",
    "crawl",
)
"""Module names that are a stage's or a library's implementation, never a config."""

PROBE = """
import json, sys
from coa.plan.config import load_pipeline_config
for profile in sys.argv[1:]:
    load_pipeline_config(profile)
print(json.dumps(sorted(sys.modules)))
"""


def test_loading_a_profile_imports_no_implementation() -> None:
    profiles = sorted(str(p) for p in (REPO / "configs").glob("*.yaml") if p.name != "base.yaml")
    assert profiles
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *profiles],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(done.stdout)
    heavy = sorted({m.split(".")[0] for m in modules} & set(NEVER))
    assert heavy == [], f"loading a profile imports {heavy}"
    ours = [m for m in modules if m.split(".")[0] in ("coa", "schemas")]
    implementation = [m for m in ours if m.rsplit(".", 1)[-1] in IMPLEMENTATION]
    assert implementation == [], f"loading a profile imports implementation: {implementation}"
    assert len(ours) <= MAX_FIRST_PARTY, f"{len(ours)} first-party modules (bound {MAX_FIRST_PARTY}): {ours}"
