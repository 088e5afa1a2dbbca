"""Configuration of the collection stage: the teacher, its endpoints and tools, how many runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.agents.offline import OfflineConfig
from coa.agents.runtime import TeacherConfig
from coa.config import StrictModel
from coa.llm import LLMConfig
from coa.tools.config import ToolsConfig


class CollectConfig(StrictModel):
    """The collection stage."""

    name: str = Field(default="trajectories", description="Artifact name of the raw trajectories.")
    backend: Literal["offline", "endpoint"] = Field(
        default="offline", description="offline = rule-based teacher (synthetic tasks only); endpoint = LLM."
    )
    samples_per_task: int = Field(default=1, ge=1, description="Teacher runs per task (for pass rates).")
    concurrency: int = Field(default=4, ge=1, description="Tasks solved at once.")
    limit: int | None = Field(default=None, ge=1, description="Collect on the first N tasks only.")
    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="Agent limits and schedule.")
    offline: OfflineConfig = Field(default_factory=OfflineConfig, description="Rule-based teacher settings.")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="Endpoints for backend=endpoint.")
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="Tools and their providers.")
    retry_failed: bool = Field(
        default=False,
        description="Repair the collection: a new artifact that keeps the finished runs and re-runs only "
        "those that ended in an error (e.g. retries exhausted on a flaky endpoint); its lineage names the "
        "artifact it repaired. Not part of the first collection's identity, so turning it on reuses it.",
    )
