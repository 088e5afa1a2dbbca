"""A hand-built lineage chain in the store (tasks → curated → model → eval) for the gate tests."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

import schemas
from coa import io
from coa.io import ArtifactRef

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _default(t: pa.DataType) -> Any:
    if pa.types.is_string(t):
        return ""
    if pa.types.is_list(t):
        return []
    if pa.types.is_integer(t):
        return 0
    if pa.types.is_floating(t):
        return 0.0
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_timestamp(t):
        return NOW
    return None


def rows(contract: schemas.Contract, items: Sequence[dict[str, Any]]) -> pa.Table:
    """Full rows of ``contract``: the given values, defaults for the rest."""
    full = [{f.name: item.get(f.name, _default(f.type)) for f in contract.schema} for item in items]
    return contract.from_rows(full)


def tasks(n_train: int = 4, n_heldout: int = 4) -> ArtifactRef:
    writer = io.Store().writer("tasks", "demo-tasks", {"n": [n_train, n_heldout]})
    if writer.existing() is not None:
        return writer.existing()  # type: ignore[return-value]
    for table, n, prefix in (("train", n_train, "t"), ("heldout", n_heldout, "h")):
        items = [
            {
                "task_id": f"{prefix}{i}",
                "source": "synthetic",
                "family": "math",
                "question": f"{prefix} question {i}",
            }
            for i in range(n)
        ]
        writer.write_table(table, rows(schemas.TASK, items), schemas.TASK)
    return writer.commit()


def curated(task_ref: ArtifactRef, gate_ok: bool = True, leak: str | None = None) -> ArtifactRef:
    """Curated trajectories of the train tasks (plus the held-out task ``leak``, if given)."""
    train = io.read_table(task_ref, "train").to_pylist()
    if leak is not None:
        train.append(next(r for r in io.read_table(task_ref, "heldout").to_pylist() if r["task_id"] == leak))
    items = [
        {
            "run_id": f"r-{t['task_id']}",
            "task_id": t["task_id"],
            "family": "math",
            "question": t["question"],
            "status": "completed",
        }
        for t in train
    ]
    writer = io.Store().writer(
        "curated",
        "curated",
        {"gate_ok": gate_ok, "leak": leak},
        upstream=[task_ref],
        extra_lineage={
            "step": "curate",
            "inputs": {"raw": {"uri": task_ref.uri, "table": "train"}},
            "gate": {"success": gate_ok, "failed": [] if gate_ok else ["curated.rows"]},
        },
    )
    if writer.existing() is not None:
        return writer.existing()  # type: ignore[return-value]
    writer.write_table("trajectories", rows(schemas.TRAJECTORY, items), schemas.TRAJECTORY)
    return writer.commit()


def model(
    data: ArtifactRef, tag: str, steps_run: int = 4, steps_planned: int = 4, alarm: str | None = None
) -> ArtifactRef:
    writer = io.Store().writer(
        "model",
        "student",
        {"tag": tag, "run": steps_run, "alarm": alarm},
        upstream=[data],
        extra_lineage={
            "step": "sft",
            "inputs": {
                "data": {"uri": data.uri, "table": "trajectories"},
                "base": {"uri": None, "model": "hub/base-model"},
            },
            "steps_run": steps_run,
            "steps_planned": steps_planned,
            "alarm": alarm,
        },
    )
    if writer.existing() is not None:
        return writer.existing()  # type: ignore[return-value]
    writer.write_file("model/config.json", json.dumps({"tag": tag, "data": data.content_hash}))
    return writer.commit()


def evaluation(task_ref: ArtifactRef, model_ref: ArtifactRef, correct: dict[str, list[bool]]) -> ArtifactRef:
    """An eval.v1 artifact of ``model_ref`` on the held-out tasks: benchmark → correctness per task."""
    items = []
    for bench, values in correct.items():
        for i, ok in enumerate(values):
            items.append(
                {
                    "eval_id": f"{model_ref.key}:{bench}:{i}",
                    "model": model_ref.uri,
                    "task_id": f"{bench}-{i}",
                    "benchmark": bench,
                    "family": "math",
                    "sample_index": 0,
                    "correct": ok,
                    "score": float(ok),
                    "format_valid": True,
                }
            )
    writer = io.Store().writer(
        "eval",
        "eval",
        {"correct": correct},
        upstream=[task_ref, model_ref],
        extra_lineage={
            "step": "evaluate",
            "model": model_ref.uri,
            "inputs": {
                "tasks": {"uri": task_ref.uri, "table": "heldout"},
                "model": {"uri": model_ref.uri, "model": model_ref.uri},
            },
        },
    )
    if writer.existing() is not None:
        return writer.existing()  # type: ignore[return-value]
    writer.write_table("eval", rows(schemas.EVAL, items), schemas.EVAL)
    return writer.commit()
