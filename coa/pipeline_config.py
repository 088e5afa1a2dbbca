"""The pipeline: its config (one section per stage) and its plan (the list of steps to run).

This is the one module that knows every stage. :func:`load_pipeline_config` reads a profile
(code defaults → YAML with ``inherit`` → dotted overrides); :func:`plan` turns the config into the
ordered list of :class:`~coa.steps.Step` that the Prefect flow, ``coa run`` and ``coa run
--dry-run`` all use. A stage whose section is absent (``null``) has no step; :func:`not_planned`
says why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from coa.collect.config import CollectConfig
from coa.config import StrictModel, canonical_json, load_config
from coa.convert.config import ConvertConfig
from coa.curate.config import CurateConfig
from coa.evaluate.config import EvalConfig
from coa.execution import ExecutionConfig
from coa.model.config import StudentConfig
from coa.registry.config import PromotionConfig
from coa.rl.config import RLStageConfig
from coa.steps import ModelInput, Step, Upstream
from coa.synthetic import SyntheticConfig
from coa.tasksets.config import TasksConfig
from coa.tools.config import ToolsConfig
from coa.train.config import SFTStageConfig


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
        default=("sft", "rl"),
        description="Stages dispatched to the deployment (a stage covers its sub-steps, e.g. rl.*).",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="Longest wait for a dispatched step's flow run; None = no limit."
    )

    def dispatches(self, step_name: str) -> bool:
        """Whether ``step_name`` runs on the deployment."""
        stage = step_name.split(".")[0]
        return self.mode == "deployment" and (step_name in self.gpu_steps or stage in self.gpu_steps)


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
        description="Nightly retraining (flows/nightly.py): registry name, SFT start, promotion gate.",
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


def load_pipeline_config(path: str | Path | None, overrides: Sequence[str] = ()) -> PipelineConfig:
    """A pipeline profile: code defaults → YAML (with ``inherit``) → dotted ``key=value`` overrides."""
    config: PipelineConfig = load_config(path, overrides, model=PipelineConfig)
    return config


NOT_BUILT: dict[str, str] = {}
"""Stages of the design that have no step yet, reported by the flow instead of being faked."""


def plan(config: PipelineConfig) -> list[Step]:
    """The steps of a pipeline run, in order; each names its inputs by the steps they come from.

    tasks (synthetic and/or imported) → collect → curate → convert → student → sft → evaluate the
    student before and after SFT on the held-out tasks → rl (``rl.families: auto`` reads the SFT
    model's evaluation) → evaluate after RL → the teacher on the same tasks → the report.
    """
    from coa.collect import step as collect
    from coa.convert import step as convert
    from coa.curate import step as curate
    from coa.evaluate import step as evaluate
    from coa.model import step as student
    from coa.rl import step as rl
    from coa.synthetic import step as synthetic
    from coa.tasksets import step as tasksets
    from coa.train import step as sft

    steps: list[Step] = []
    train: Upstream | None = None
    if config.synthetic is not None:
        steps.append(synthetic.step(config.synthetic))
        train = Upstream("synthetic", "train")
    if config.tasks.sources:
        steps.append(tasksets.step(config.tasks))
        train = train or Upstream("tasks", "tasks")
    if train is None:
        from coa.errors import UserError

        raise UserError("no tasks: configure `synthetic` or `tasks.sources` (see configs/demo.yaml)")
    if config.collect is None:
        return steps
    steps.append(collect.step(config.collect, train))
    raw = Upstream("collect", "trajectories")
    if config.collect.retry_failed:
        steps.append(collect.retry_step(config.collect, raw, train))
        raw = Upstream("collect.retry", "trajectories")
    if config.curate is None:
        return steps
    steps.append(curate.step(config.curate, raw, train))
    if config.convert is None:
        return steps
    steps.append(convert.step(config.convert, Upstream("curate", "trajectories"), train))
    if config.student is None:
        return steps
    base: ModelInput | Upstream
    if config.student.base is not None:
        base = ModelInput(external=config.student.base)
    else:
        steps.append(student.step(config.student, Upstream("convert", "sft")))
        base = Upstream("student")
    tuned = None
    if config.sft is not None:
        steps.append(sft.step(config.sft, base, Upstream("convert", "sft")))
        tuned = Upstream("sft")
    prompts = Upstream("convert", "rl_prompts")
    if config.evaluate is None or config.synthetic is None:
        if config.rl is not None:  # rl.families: auto needs the evaluation: rl.step says so
            steps.append(rl.step(config.rl, tuned or base, prompts))
        return steps
    heldout = Upstream("synthetic", "heldout")
    tools = eval_tools(config)
    steps.append(evaluate.step(config.evaluate, tools, heldout, base, name="evaluate.before"))
    if tuned is not None:
        steps.append(evaluate.step(config.evaluate, tools, heldout, tuned, name="evaluate.after"))
    reinforced = None
    if config.rl is not None:
        # the evaluation of the model RL starts from: read only with rl.families: auto
        judged = Upstream("evaluate.after" if tuned is not None else "evaluate.before", "eval")
        steps.append(rl.step(config.rl, tuned or base, prompts, evaluation=judged))
        reinforced = Upstream("rl")
        steps.append(evaluate.step(config.evaluate, tools, heldout, reinforced, name="evaluate.after_rl"))
    steps.append(collect.step(config.collect, heldout, name="collect.heldout"))
    steps.append(
        evaluate.report_step(
            config.run_name,
            heldout,
            Upstream("evaluate.before", "eval"),
            Upstream("evaluate.after", "eval") if tuned is not None else None,
            tuned,
            Upstream("collect.heldout", "trajectories"),
            after_rl=Upstream("evaluate.after_rl", "eval") if reinforced is not None else None,
            rl=reinforced,
        )
    )
    return steps


def eval_tools(config: PipelineConfig) -> ToolsConfig:
    """The tools the student gets: the evaluate section's, else the teacher's, else the defaults."""
    if config.evaluate is not None and config.evaluate.tools is not None:
        return config.evaluate.tools
    return config.collect.tools if config.collect is not None else ToolsConfig()


def not_planned(config: PipelineConfig, steps: Sequence[Step]) -> dict[str, str]:
    """Stage → why it has no step in this plan (not configured, or not built yet)."""
    names = {s.name.split(".")[0] for s in steps}
    out = {}
    for stage in ("collect", "curate", "convert", "student", "sft", "rl", "evaluate"):
        if stage not in names and not (stage == "student" and config.student and config.student.base):
            out[stage] = "not configured" if getattr(config, stage) is None else "needs an earlier stage"
    if config.evaluate is not None and config.synthetic is None and "evaluate" in out:
        out["evaluate"] = "needs held-out synthetic tasks"
    out.update({stage: f"not built yet: {what}" for stage, what in NOT_BUILT.items()})
    return out
