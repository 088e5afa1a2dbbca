"""The pipeline's top-level config: one section per stage (it grows as stages are built).

A stage whose section is absent (``null``) is skipped; the flow says so.
"""

from __future__ import annotations

import hashlib

from pydantic import Field, model_validator

from coa.config import StrictModel, TasksConfig, canonical_json
from coa.convert.stage import ConvertConfig
from coa.curate.config import CurateConfig
from coa.evaluate.config import EvalConfig
from coa.synthetic import SyntheticConfig
from coa.teacher import CollectConfig
from coa.train.stage import SFTStageConfig, StudentConfig


class PipelineConfig(StrictModel):
    """The whole pipeline run."""

    run_name: str = Field(default="coa", description="Human-readable name of this pipeline configuration.")
    synthetic: SyntheticConfig | None = Field(
        default=None, description="Built-in synthetic task families (train + held-out); null = none."
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Task sets to import (task.v1).")
    collect: CollectConfig | None = Field(
        default=None, description="Teacher collection on the training tasks; null = skip."
    )
    curate: CurateConfig | None = Field(
        default=None, description="Filter, dedup, decontaminate and gate the raw trajectories; null = skip."
    )
    convert: ConvertConfig | None = Field(
        default=None, description="Curated trajectories to CoA SFT examples and RL prompts; null = skip."
    )

    student: StudentConfig | None = Field(
        default=None,
        description="The model to fine-tune (a folder or hub id, or the tiny student built on the spot); "
        "null = no training.",
    )
    sft: SFTStageConfig | None = Field(
        default=None,
        description="Supervised fine-tuning of the student on the converted examples; null = skip.",
    )

    evaluate: EvalConfig | None = Field(
        default=None,
        description="Evaluate the student on the held-out synthetic tasks before and after SFT, beside the "
        "teacher's cost on them; null = skip.",
    )

    @model_validator(mode="after")
    def _prompts_match(self) -> PipelineConfig:
        if self.evaluate and self.convert and self.evaluate.prompt_style != self.convert.prompt_style:
            raise ValueError(
                f"evaluate.prompt_style ({self.evaluate.prompt_style}) must equal convert.prompt_style "
                f"({self.convert.prompt_style}): the model is evaluated with the prompts it was trained on"
            )
        return self

    def fingerprint(self) -> str:
        """Stable hash of the resolved config."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()
