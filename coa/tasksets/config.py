"""Configuration of the task-import stage: which task files to read into ``task.v1``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel

Family = Literal["web", "mhqa", "math", "code"]


class TaskSourceConfig(StrictModel):
    """One task set to import into ``task.v1``."""

    path: str = Field(description="File (.json/.jsonl/.parquet) or a local Hugging Face `datasets` folder.")
    name: str | None = Field(
        default=None, description="Source name used in task ids; default: the file stem."
    )
    family: Family | None = Field(
        default=None,
        description="Task family; required for plain question/answer files whose layout does not imply one.",
    )
    limit: int | None = Field(default=None, ge=1, description="Keep only the first N usable rows.")


class TasksConfig(StrictModel):
    """The task-import stage."""

    name: str = Field(default="tasks", description="Artifact name of the imported task set.")
    sources: tuple[TaskSourceConfig, ...] = Field(default=(), description="Task sets to import, in order.")
