"""What every trainer recipe (SFT, GRPO) shares in its config, declared once.

* :class:`TrainLoop`: the optimizer-step loop: the plan (``max_steps``, ``time_budget_s``), the
  learning rate, clipping, the seed, checkpoints and logging;
* :class:`TrainRun`: what one run from a file (``python -m <recipe> --config resolved.yaml``) adds to
  its stage's config: the model to start from and the output folder;
* :class:`TrainStage`: where the pipeline stage runs (``launcher``, ``accelerate_config``,
  ``num_processes``, ``nodes``);
* :class:`LoraSettings`: LoRA adapters instead of all weights (the ``lora`` section of ``sft`` and,
  with RL's defaults, of ``rl``; their ``peft`` config is :func:`coa.kit.lora.peft_config_of`).

A recipe declares one config, its stage's (``SFTStageConfig(TrainLoop, TrainStage)``), and derives
its run's form from it (``SFTRunConfig(SFTStageConfig, TrainRun)``), so the YAML keys stay flat
(``sft.learning_rate``, ``rl.save_steps``). Where the recipes' defaults differ the field has none
here and each recipe states its own with the type alias below (``learning_rate: LearningRate =
2e-5``): the type, bounds and documentation stay in one place.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from coa.config import StrictModel

MaxSteps = Annotated[
    int | None,
    Field(
        ge=1,
        description="Optimizer steps to run (the plan); with time_budget_s, the most the budget may plan. "
        "SFT needs max_steps or time_budget_s; RL always needs max_steps.",
    ),
]
LearningRate = Annotated[
    float,
    Field(
        gt=0,
        description="Peak AdamW learning rate (after warm-up; SFT follows lr_scheduler, RL keeps it "
        "constant). The tiny CPU student learns well at 2e-3 in SFT.",
    ),
]
SaveSteps = Annotated[int, Field(ge=1, description="Checkpoint every this many optimizer steps.")]
LoggingSteps = Annotated[int, Field(ge=1, description="Log the metrics every this many optimizer steps.")]


class TrainLoop(StrictModel):
    """The optimizer-step loop every recipe runs (recipes set the defaults that differ)."""

    max_steps: MaxSteps
    time_budget_s: float | None = Field(
        default=None,
        gt=0,
        description="Train for at most this many seconds: the plan is fitted to the measured step time and "
        "re-fitted while training so the run ends on time, never past max_steps (SFT: setup and "
        "calibration not counted). Under several ranks rank 0's clock decides and every rank stops at "
        "the same step.",
    )
    learning_rate: LearningRate
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    seed: int = Field(default=0, description="Seed of the data order, sampling and any random init.")
    save_steps: SaveSteps
    save_total_limit: int | None = Field(default=2, ge=1, description="Checkpoints kept (oldest removed).")
    logging_steps: LoggingSteps


class TrainRun(StrictModel):
    """One run from a file: the model to start from and where to write."""

    base_model: str = Field(
        description="The model to train: a local folder (`coa model init`, an SFT model) or a hub id."
    )
    output_dir: str | None = Field(
        default=None,
        description="Folder for the checkpoints, the final model and the report (the caller may override).",
    )


class TrainStage(StrictModel):
    """Where a pipeline training stage runs."""

    launcher: Literal["auto", "in_process", "accelerate", "torchrun"] = Field(
        default="auto",
        description="auto = in this process on CPU, `accelerate launch` when a CUDA GPU is present; "
        "torchrun = `torchrun --standalone --nproc_per_node num_processes` (plain DDP; gloo on CPU: "
        "how several ranks are tested without GPUs).",
    )
    accelerate_config: str = Field(
        default="infra/accelerate/single_gpu.yaml",
        description="accelerate config for the launched run: single_gpu.yaml (one process), ddp.yaml "
        "(a full copy per GPU; to ~3B parameters), fsdp2.yaml (FSDP2, sharded) or multi_gpu_zero3.yaml "
        "(DeepSpeed ZeRO-3) beyond. The batch (batch_size x grad_accumulation) is global: the ranks "
        "share it.",
    )
    num_processes: int | None = Field(
        default=None,
        ge=1,
        description="Ranks (GPUs): overrides the accelerate config's process count; torchrun's "
        "--nproc_per_node (default 1). With nodes > 1: the ranks on each node.",
    )
    nodes: int = Field(
        default=1,
        ge=1,
        description="Machines the run spans (torchrun's multi-node rendezvous; docs/how-to/multi-node.md): "
        "this step's process is node 0 and launches `launcher` (torchrun, or accelerate with its config; "
        "auto = accelerate) with num_processes ranks per node; nodes 1..N-1 run `python -m "
        "coa.kit.node`. The rendezvous comes from the environment (COA_RDZV_ENDPOINT or "
        "MASTER_ADDR/MASTER_PORT, COA_NODES_DIR). The global batch is unchanged: all ranks share it.",
    )

    @model_validator(mode="after")
    def _nodes_launch(self) -> TrainStage:
        if self.nodes > 1 and self.launcher == "in_process":
            raise ValueError(
                f"nodes is {self.nodes} but launcher is in_process: a run on several nodes is launched; set "
                "launcher to torchrun (plain DDP) or accelerate (with accelerate_config)"
            )
        return self


RESUME_FREE_FIELDS = frozenset(
    {"output_dir", "logging_steps", "save_steps", "save_total_limit", "name", *TrainStage.model_fields}
)
"""Fields of every recipe that may differ between a run and its resumption (they do not change the
training itself: where it logs, checkpoints and runs, the artifact's name); each recipe adds its own."""


DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(StrictModel):
    """Train LoRA adapters instead of all weights (needs ``peft``)."""

    r: int = Field(default=16, ge=1, description="Rank of the adapters.")
    alpha: int = Field(default=32, ge=1, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: tuple[str, ...] = Field(
        default=DEFAULT_LORA_TARGETS, min_length=1, description="Names of the linear layers to adapt."
    )
