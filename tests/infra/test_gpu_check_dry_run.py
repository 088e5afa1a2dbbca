"""``infra/gpu-check.sh --dry-run``: every part of the GPU check but the CUDA work, on this CPU.

The same script, commands and files as on a lent GPU (tiny shapes, a few rows the tests use when no
data was carried): the wheels pip would install on Python 3.12 with no index, the CUDA tests
collected, both benches' ``--quick`` runs, the demo's plan against the store. A broken part costs a
CPU minute here instead of device minutes there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(tmp_path: Path, *parts: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "GPU_CHECK_WORK": str(tmp_path / "work"),
        "PY": sys.executable,
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",  # a dry run even where a GPU is
    }
    proc = subprocess.run(
        ["bash", "infra/gpu-check.sh", "--dry-run", *parts],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    return proc, out


def statuses(out: Path) -> dict[str, str]:
    lines = (out / "parts.tsv").read_text().splitlines()[1:]
    return {name: status for name, _, status in (line.split("\t") for line in lines)}


@pytest.mark.slow
def test_every_part_dry_runs_through_the_same_commands(tmp_path: Path) -> None:
    """One dry run of the default parts and the CUDA tests' (the environment part, a wheel build and
    pip's resolution, runs once): ~3 minutes on two busy cores, four `accelerate launch` processes and
    the rollout backends."""
    proc, out = dry_run(tmp_path, "tests", "demo", "sft", "rl")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert statuses(out) == {"tests": "0", "demo": "0", "sft": "0", "rl": "0"}
    env = (out / "env.txt").read_text()
    assert "would install on CPython 3.12 with --no-index" in env and "coa_pipeline-" in env
    assert "imports: ok on CPU (dry run)" in env and "liger: " in env
    tests = (out / "tests.txt").read_text()
    assert "test_flex_attention_packs_without_leakage_on_a_gpu" in tests and "collected" in tests
    demo = (out / "demo-gpu.log").read_text()
    assert "synthetic" in demo and "report" in demo and "build" in demo  # the plan, each step's fate
    sft = json.loads((out / "sft.json").read_text())
    tiny = sft["figures"]["tiny"]
    assert tiny["ours"]["steps"] == tiny["bare_trl"]["steps"] == 3
    assert tiny["ours"]["tokens_per_s"] > 0 and tiny["bare_trl"]["tokens_per_s"] > 0
    assert tiny["ours"]["mfu"] is None  # no peak for a CPU: no MFU rather than a made-up one
    assert sft["ratios"]["tiny ours / bare TRL (tokens/s)"] > 0
    rl = json.loads((out / "rl.json").read_text())
    rollouts = rl["figures"]["rollouts"]  # the three backends on the same requests
    assert rollouts["tokens_per_s"]["ours (hf_batched)"] > 0 and rollouts["tokens_per_s"]["generate"] > 0
    assert rollouts["requests"] > 0 and rollouts["completion_tokens"] >= rollouts["requests"]
    assert "rollout tokens/s ours / generate" in rl["ratios"]
    step = rl["figures"]["rl_step"]
    assert step["steps"] == 1 and step["episodes"] > 0
    assert set(step["split"]) == {"generation_s", "tools_s", "training_s", "total_s"}
