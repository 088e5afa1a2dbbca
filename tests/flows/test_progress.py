"""Live progress in the Prefect UI, against a real Prefect server: a dispatched SFT step's progress
artifact moves from 0 to 100% while it runs, read back from the API during the run.

The step runs as a GPU worker runs a dispatched step (``flows/step.py:run_one_step`` on its spec, in
a process of its own: :mod:`tests.flows.progress_sft`), its trainer in that process (``in_process``)
or launched in its own (``torchrun``, as ``accelerate launch`` on a GPU: rank 0 writes its progress
file, the step relays it); the test polls the server's artifacts every 0.1 s meanwhile. Checked: the
progress artifact exists before the step is done, shows a value strictly between 0 and 100 while the
trainer runs, ends at 100 with ``planned`` equal to the plan's ``sft.max_steps`` and the trainer's
last loss and tokens/s, and the live table keeps its bounded rate.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks.progress import TABLE_EVERY_S

from .test_deployment import REPO
from .test_deployment import prefect_env as prefect_env  # the fixture: a server on a fresh database
from .test_worker_killed import _inputs

pytestmark = pytest.mark.slow
STEPS = 30
SFT = [
    *(f"sft.max_steps={STEPS}", "sft.time_budget_s=null", "sft.logging_steps=1", "sft.save_steps=1000"),
    *("sft.batch_size=8", "sft.max_length=256", "sft.num_processes=1"),
]


def _artifacts(env: dict[str, str], kind: str) -> list[dict[str, Any]]:
    body = {"artifacts": {"type": {"any_": [kind]}}, "sort": "CREATED_DESC"}
    reply = httpx.post(f"{env['PREFECT_API_URL']}/artifacts/filter", json=body, timeout=10)
    reply.raise_for_status()
    return list(reply.json())


@pytest.mark.parametrize("launcher", ["in_process", "torchrun"])
def test_a_dispatched_sft_steps_progress_moves_from_0_to_100_while_it_runs(
    prefect_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
    launcher: str,
) -> None:
    model, data = _inputs(tmp_path)
    started = time.monotonic()
    overrides = json.dumps([*SFT, f"sft.launcher={launcher}"])
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.flows.progress_sft", model, data, overrides],
        env={**prefect_env, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: list[tuple[float, str]] = []
    deadline = time.monotonic() + 300
    while run.poll() is None and time.monotonic() < deadline:
        for artifact in _artifacts(prefect_env, "progress"):
            value = (float(artifact["data"]), artifact["description"] or "")
            if not seen or seen[-1] != value:
                seen.append(value)
        time.sleep(0.1)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out[-3000:]
    (final,) = _artifacts(prefect_env, "progress")
    assert final["key"] == "progress-sft-progress" and float(final["data"]) == 100.0
    assert f"built: {STEPS} of {STEPS} planned (100%)" in final["description"]
    values = [v for v, _ in seen]
    assert values[0] < 100.0 and any(0.0 < v < 100.0 for v in values), seen
    assert values == sorted(values), seen  # it only moves forward
    midway = next(d for v, d in seen if 0.0 < v < 100.0)
    assert f" of {STEPS} planned (" in midway and "elapsed" in midway  # planned = the plan's steps
    # the trainer's live figures (its log lines: loss, tokens/s) ride along
    loss = re.search(r", loss ([0-9.]+), ([0-9,]+) tokens/s, ", final["description"])
    assert loss is not None and float(loss.group(1)) > 0, final["description"]
    versions = [a for a in _artifacts(prefect_env, "table") if a["key"] == "progress-sft-live"]
    assert len(versions) <= (time.monotonic() - started) / TABLE_EVERY_S + 1  # the table's bounded rate
