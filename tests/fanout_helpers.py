"""Shared by the fan-out tests: one small pipeline (synthetic → collect → curate → convert) per store."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pyarrow as pa

from coa import io
from coa.collect import step as collect_step
from coa.convert import step as convert_step
from coa.curate import step as curate_step
from coa.execution import ShardExecutor
from coa.plan import load_pipeline_config
from coa.steps import StepResult, run_step
from coa.synthetic import step as synthetic_step

TIMING = ("latency_s", "started_at", "finished_at")
"""Wall-clock columns of trajectory.v1 (run level and per step): they differ between any two runs."""


def demo_config(**train: int) -> Any:
    """configs/demo.yaml with a small synthetic train split (and 4 held-out tasks)."""
    sizes = {"arithmetic": 0, "multihop": 0, "programming": 0, **train}
    overrides = [f"synthetic.train.{k}={v}" for k, v in sizes.items()]
    overrides += [
        "synthetic.heldout.arithmetic=2",
        "synthetic.heldout.multihop=2",
        "synthetic.heldout.programming=0",
    ]
    overrides += ["collect.concurrency=2"]
    return load_pipeline_config("configs/demo.yaml", overrides)


def run(cfg: Any, root: str, executor: ShardExecutor | None, curate: bool = True) -> dict[str, StepResult]:
    """synthetic → collect (→ curate → convert) into the store at ``root``, shards on ``executor``."""
    store = io.Store(root)
    done: dict[str, StepResult] = {}
    steps = [synthetic_step.step(cfg.synthetic)]
    pages = _up("synthetic", "encyclopedia")
    steps.append(collect_step.step(cfg.collect, _up("synthetic", "train"), encyclopedia=pages))
    if curate:
        steps.append(curate_step.step(cfg.curate, _up("collect", "trajectories"), _up("synthetic", "train")))
        steps.append(convert_step.step(cfg.convert, _up("curate", "trajectories"), _up("synthetic", "train")))
    for step in steps:
        done[step.name] = run_step(step, store, done, executor=executor)
    return done


def _up(step: str, table: str) -> Any:
    from coa.steps import Upstream

    return Upstream(step, table)


def without_timing(table: pa.Table) -> list[dict[str, Any]]:
    """The rows with every wall-clock value removed (run level and inside steps)."""
    rows = table.drop_columns([c for c in TIMING if c in table.column_names]).to_pylist()
    for row in rows:
        for step in row.get("steps") or []:
            for column in TIMING:
                step.pop(column, None)
    return rows


def manifest_hashes(result: StepResult) -> dict[str, str]:
    """sha256 of every table file of the artifact (from its manifest)."""
    fs, path = io.filesystem(result.ref.uri)
    with fs.open(f"{path}/{io.MANIFEST}", "rb") as fh:
        manifest = json.loads(fh.read())
    return {name: sha for name, sha in manifest["files"].items() if name.endswith(".parquet")}


def rebuild_locally(result: StepResult, step: Any, root: str, done: dict[str, StepResult]) -> StepResult:
    """Move the committed artifact aside and build the same step (same key) in one process."""
    fs, path = io.filesystem(result.ref.uri)
    shutil.move(path, path + ".sharded")
    return run_step(step, io.Store(root), done)


def local_rebuilds(
    cfg: Any, done: dict[str, StepResult], root: str
) -> dict[str, tuple[StepResult, StepResult]]:
    """Step → (the sharded build, the same step rebuilt in one process on the same inputs).

    Convert first: its inputs (the sharded curate artifact) must still be in place."""
    from coa.steps import TableInput

    tasks = TableInput(done["synthetic"].ref, "train")
    convert = convert_step.step(cfg.convert, TableInput(done["curate"].ref, "trajectories"), tasks)
    curate = curate_step.step(cfg.curate, TableInput(done["collect"].ref, "trajectories"), tasks)
    out = {"convert": (done["convert"], rebuild_locally(done["convert"], convert, root, done))}
    out["curate"] = (done["curate"], rebuild_locally(done["curate"], curate, root, done))
    return out
