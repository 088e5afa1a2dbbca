"""What the tracker tests build: a tiny SFT run's config and inputs, a two-task evaluation."""

from __future__ import annotations

import pyarrow as pa

import schemas
from coa import io
from coa.evaluate.config import EvalConfig
from coa.train.config import SFTStageConfig
from tests.evaluate.test_stage import task, tasks_table

SFT = SFTStageConfig(
    max_steps=4, learning_rate=3e-3, batch_size=8, max_length=256, logging_steps=1, save_steps=4,
    launcher="in_process",
)  # fmt: skip
EVAL = EvalConfig(max_turns=2, max_new_tokens=8, max_total_tokens=16, prompt_style="brief")


def write_converted(store: io.Store, rows: pa.Table) -> io.ArtifactRef:
    writer = store.writer("converted", "coa", {"test": 1})
    writer.write_table("sft", rows, schemas.SFT)
    return writer.commit()


def write_tasks(store: io.Store) -> io.ArtifactRef:
    writer = store.writer("tasks", "unit", {"n": 2})
    table = tasks_table(task(0, "What is 1 + 1?"), task(1, "What is 2 + 3?"))
    writer.write_table("heldout", table, schemas.TASK)
    return writer.commit()
