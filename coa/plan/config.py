"""The config of a pipeline or nightly run: one section per stage, where steps run, and promotion.

:func:`load_pipeline_config` reads a profile (code defaults → YAML with ``inherit`` → dotted
overrides) into :class:`PipelineConfig`; the plans (:mod:`coa.plan.pipeline`, :mod:`coa.plan.nightly`)
turn it into steps. A stage whose section is absent (``null``) has no step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from coa.collect.config import CollectConfig
from coa.config import Overrides, StrictModel, canonical_json, load_config, overrides_of
from coa.convert.config import ConvertConfig
from coa.curate.config import CurateConfig
from coa.evaluate.config import EvalConfig
from coa.execution import ExecutionConfig
from coa.model.config import StudentConfig
from coa.registry.config import GateConfig
from coa.rl.config import RLStageConfig
from coa.sample.config import SampleConfig
from coa.synthetic import SyntheticConfig
from coa.tasksets.config import TasksConfig
from coa.tracking.config import TrackingConfig
from coa.train.config import SFTStageConfig

if TYPE_CHECKING:
    RoundSFTConfig = Overrides
else:
    RoundSFTConfig = overrides_of(
        SFTStageConfig,
        "RoundSFTConfig",
        "Overrides of the `sft` section for SFT rounds 2.. (self-improvement); a key left out keeps sft's.",
        __name__,
    )
    """``round_sft``: the fields of :class:`~coa.train.config.SFTStageConfig`, each optional (one
    declaration of them: this model is made from it)."""


class DispatchConfig(StrictModel):
    """Where the steps run: all in the flow's process, or the GPU steps on their own work pool."""

    mode: Literal["inline", "deployment"] = Field(
        default="inline",
        description="inline: every step in the pipeline flow's process (no worker needed); deployment: the "
        "steps named in gpu_steps run as the `run-one-step` flow of `deployment` (e.g. on the gpu pool).",
    )
    deployment: str = Field(
        default="run-one-step/gpu",
        description="The deployment ('flow-name/deployment-name') that runs one step on the GPU pool.",
    )
    gpu_steps: tuple[str, ...] = Field(
        default=("sft", "sample", "rl"),
        description="Stages dispatched to the deployment (a stage covers its sub-steps, e.g. rl.*, "
        "sample.r1): the ones that run the student (training, and the self-improvement rounds' sampling).",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="Longest wait for a dispatched step's flow run; None = no limit."
    )
    crash_retries: int = Field(
        default=2,
        ge=0,
        description="Times a dispatched step's flow run that crashed (its process or its worker died) is "
        "sent again, each retry resuming from the step's last complete checkpoint; 0: it fails at once.",
    )
    heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between the heartbeats a dispatched step's flow run writes to the store "
        "(`leases/<flow run id>.json`) while it builds; the flow that dispatched it watches them.",
    )
    heartbeat_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A dispatched step's flow run that is Running and has not beaten for this long (its "
        "worker or machine died) is marked Crashed by the flow that dispatched it and sent again "
        "(dispatch.crash_retries); a run still queued (Scheduled, Pending) is never declared dead.",
    )

    @model_validator(mode="after")
    def _timeout_spans_beats(self) -> DispatchConfig:
        if self.heartbeat_timeout_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"dispatch.heartbeat_timeout_s ({self.heartbeat_timeout_s:g}) must be at least twice "
                f"dispatch.heartbeat_s ({self.heartbeat_s:g}): one late beat would read as a dead run; "
                "raise heartbeat_timeout_s or lower heartbeat_s"
            )
        return self

    def dispatches(self, step_name: str) -> bool:
        """Whether ``step_name`` runs on the deployment."""
        stage = step_name.split(".")[0]
        return self.mode == "deployment" and (step_name in self.gpu_steps or stage in self.gpu_steps)


class PromotionConfig(StrictModel):
    """Nightly retraining: which registry name the candidate competes for, and how."""

    model_name: str = Field(
        default="coa-agent", description="Registry name whose champion the candidate challenges."
    )
    sft_from: Literal["base", "champion"] = Field(
        default="champion",
        description="Fine-tune the configured base (student section) or tonight's champion (the base when "
        "there is none yet).",
    )
    new_tasks_only: bool = Field(
        default=True, description="Collect only tasks whose ids no earlier night collected."
    )
    previous_nights: int | None = Field(
        default=None, ge=0, description="Earlier nights whose data is curated with tonight's; None = all."
    )
    gate: GateConfig = Field(default_factory=GateConfig, description="The promotion gate.")


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
    rounds: int = Field(
        default=1,
        ge=1,
        description="SFT rounds (self-improvement): after round r the round-r model samples the training "
        "tasks (`sampling`), its verified-correct attempts are curated beside the teacher's runs, converted, "
        "and round r+1 fine-tunes the round-r model on them; RL follows the last round. 1 = one SFT.",
    )
    sampling: SampleConfig | None = Field(
        default=None,
        description="How the student samples the training tasks between rounds (k samples, temperature, "
        "limits); null = SampleConfig's defaults. Used only with rounds > 1.",
    )
    round_sft: RoundSFTConfig = Field(
        default_factory=RoundSFTConfig,
        description="Overrides of the `sft` section for rounds 2.. (e.g. {max_steps: 3000, warmup_steps: "
        "0}); empty = the same SFT as round 1.",
    )
    rl: RLStageConfig | None = Field(
        default=None,
        description="Agentic RL (GRPO/DAPO on multi-turn tool rollouts) of the SFT model on the converted "
        "RL prompts, evaluated after it; null = skip.",
    )

    evaluate: EvalConfig | None = Field(
        default=None,
        description="Evaluate the student on the held-out synthetic tasks before and after SFT, beside the "
        "teacher's cost on them; null = skip.",
    )

    promotion: PromotionConfig | None = Field(
        default=None,
        description="Nightly retraining (coa/plan/nightly.py): registry name, SFT start, promotion gate.",
    )
    dispatch: DispatchConfig = Field(
        default_factory=DispatchConfig,
        description="Inline (one process) or GPU steps dispatched to a work pool's deployment.",
    )
    execution: ExecutionConfig = Field(
        default_factory=ExecutionConfig,
        description="Where collection, curation and conversion shards run: local (one process) or Ray; never "
        "part of an artifact's identity (the same inputs give the same artifacts either way).",
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="Experiment tracking (coa/tracking): none (default, offline), mlflow, tensorboard, "
        "wandb, trackio; never part of an artifact's identity.",
    )

    @model_validator(mode="after")
    def _prompts_match(self) -> PipelineConfig:
        if self.evaluate and self.convert and self.evaluate.prompt_style != self.convert.prompt_style:
            raise ValueError(
                f"evaluate.prompt_style ({self.evaluate.prompt_style}) must equal convert.prompt_style "
                f"({self.convert.prompt_style}): the model is evaluated with the prompts it was trained on"
            )
        return self

    @model_validator(mode="after")
    def _rounds_valid(self) -> PipelineConfig:
        if self.round_sft.model_fields_set and self.sft is None:
            raise ValueError("round_sft needs an `sft` section (it overrides it for rounds 2..)")
        self.later_sft()  # round_sft's keys and values must make a valid SFT section
        return self

    def later_sft(self) -> SFTStageConfig | None:
        """The SFT section of rounds 2..: ``sft`` with ``round_sft`` over it."""
        if self.sft is None:
            return None
        if not self.round_sft.model_fields_set:
            return self.sft
        return self.round_sft.over(self.sft)

    def fingerprint(self) -> str:
        """Stable hash of the resolved config."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()


def load_pipeline_config(path: str | Path | None, overrides: Sequence[str] = ()) -> PipelineConfig:
    """A pipeline profile: code defaults → YAML (with ``inherit``) → dotted ``key=value`` overrides."""
    config: PipelineConfig = load_config(path, overrides, model=PipelineConfig)
    return config
