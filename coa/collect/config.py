"""Configuration of the collection stage: the teacher, its endpoints and tools, how many runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coa.agents.config import OfflineConfig, TeacherConfig
from coa.config import StrictModel
from coa.llm.config import LLMConfig
from coa.tools.config import ToolsConfig


class CollectConfig(StrictModel):
    """The collection stage."""

    name: str = Field(default="trajectories", description="Artifact name of the raw trajectories.")
    backend: Literal["offline", "endpoint"] = Field(
        default="offline", description="offline = rule-based teacher (synthetic tasks only); endpoint = LLM."
    )
    samples_per_task: int = Field(default=1, ge=1, description="Teacher runs per task (for pass rates).")
    concurrency: int = Field(default=4, ge=1, description="Tasks solved at once.")
    limit: int | None = Field(
        default=None,
        ge=1,
        description="Collect on N tasks only, split across families in proportion to their share of the "
        "table (at least one each when N allows; the first tasks of each family); a family left out is a "
        "warning.",
    )
    limit_per_family: dict[str, int] | None = Field(
        default=None,
        description="Instead of limit: the first N tasks of each named family (families not named are left "
        "out, with a warning), e.g. {math: 100, code: 50}.",
    )
    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="Agent limits and schedule.")
    offline: OfflineConfig = Field(default_factory=OfflineConfig, description="Rule-based teacher settings.")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="Endpoints for backend=endpoint.")
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="Tools and their providers.")
    max_failed_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="A collection in which every run, or more than this share of runs, ended in an "
        "infrastructure error (endpoint down, retries exhausted) is not committed: the step exits 3 and a "
        "rerun runs the failed runs again (the finished ones stay checkpointed). The failed share is in "
        "the summary either way.",
    )
    preflight: bool = Field(
        default=True,
        exclude=True,
        description="Check each endpoint the collection calls (the teacher, the search tools' serper or "
        "retrieve endpoints) with one short request before "
        "the first run: unreachable or not serving chat completions -> exit 3 within seconds, with the fix. "
        "How the collection runs, not part of its identity.",
    )
    max_consecutive_failures: int = Field(
        default=8,
        ge=0,
        exclude=True,
        description="Circuit breaker: stop the collection after this many runs in a row ended in an "
        "infrastructure error (exit 3, the finished runs stay checkpointed) instead of spending every "
        "run's retries; 0 = never. A run the model failed by answering off the agents' protocol is the "
        "run's failure, not infrastructure, and does not count. Not part of the collection's identity.",
    )
    retry_failed: bool = Field(
        default=False,
        description="Repair the collection: a new artifact that keeps the finished runs and re-runs only "
        "those that ended in an error (e.g. retries exhausted on a flaky endpoint); its lineage names the "
        "artifact it repaired. Not part of the first collection's identity, so turning it on reuses it.",
    )

    @model_validator(mode="after")
    def _one_limit(self) -> CollectConfig:
        if self.limit is not None and self.limit_per_family is not None:
            raise ValueError("set collect.limit or collect.limit_per_family, not both")
        if self.limit_per_family is not None and any(n < 1 for n in self.limit_per_family.values()):
            raise ValueError("collect.limit_per_family values must be >= 1")
        return self
