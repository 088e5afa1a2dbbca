"""Configuration and result of an SFT run: :class:`SFTRunConfig`, :class:`SFTResult`, the errors,
and :data:`SFT`, the recipe the trainer kit (:mod:`coa.kit`) runs it as.

The fields every recipe shares (the plan, learning rate, checkpoints, logging; the model and output
folder; where the stage runs) are declared once in :mod:`coa.kit.config`. Kept apart from
:mod:`coa.train.sft` so that the pipeline config can import it without importing torch,
transformers or TRL.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coa.errors import CheckFailed
from coa.kit.config import RESUME_FREE_FIELDS as KIT_RESUME_FREE
from coa.kit.config import (
    LearningRate,
    LoggingSteps,
    LoraSettings,
    MaxSteps,
    SaveSteps,
    TrainLoop,
    TrainRun,
    TrainStage,
)
from coa.kit.recipe import Recipe, TrainError

RESUME_FREE_FIELDS = KIT_RESUME_FREE | {"data", "table", "time_budget_s", "calibration_steps", "eval_steps"}
"""Fields that may differ between a run and its resumption (they do not change the training itself)."""


class SFTError(TrainError):
    """A run that cannot start or cannot be reported (bad output folder, config changed on resume…)."""


class StepCountError(SFTError, CheckFailed):
    """The run did not take the planned number of optimizer steps; its result is not reported."""


class SFTStageConfig(TrainLoop, TrainStage):
    """The SFT stage, the one SFT config a user sets (the ``sft`` section of a profile): how to train,
    on which examples, and where. The loop's fields are the kit's
    (:class:`~coa.kit.config.TrainLoop`), with SFT's defaults; where it runs is
    :class:`~coa.kit.config.TrainStage`. A run's form (:class:`SFTRunConfig`) is derived from it.

    ``max_steps`` or ``time_budget_s`` sets the plan; with both, the time budget plans and
    ``max_steps`` caps it (a faster machine stops at the cap instead of training more epochs).
    """

    max_steps: MaxSteps = None
    learning_rate: LearningRate = 2e-5
    save_steps: SaveSteps = 500
    logging_steps: LoggingSteps = 10

    calibration_steps: int = Field(
        default=20,
        ge=1,
        description="Optimizer steps a throwaway copy of the model times (after 5 warm-up steps) to plan a "
        "time budget.",
    )
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        default="cosine", description="Schedule after warm-up, over the planned steps."
    )
    min_lr_ratio: float = Field(
        default=0.0, ge=0, lt=1, description="With cosine: floor of the decay as a fraction of the peak."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    adam_beta1: float = Field(default=0.9, gt=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(default=0.999, gt=0, lt=1, description="AdamW beta2 (0.98 suits tiny models).")
    batch_size: int = Field(
        default=8,
        ge=1,
        description="Micro-batch: examples, or packed rows of max_length tokens with packing. The global "
        "batch, batch_size x grad_accumulation per optimizer step, is the same on any number of ranks: "
        "they share it (the accumulation divided first, else the micro-batch; coa.kit.ranks).",
    )
    grad_accumulation: int = Field(
        default=1, ge=1, description="Micro-batches per optimizer step (of one process; see batch_size)."
    )
    heldout_fraction: float = Field(
        default=0.02,
        ge=0,
        le=0.5,
        description="Share of the examples (whole tasks, picked by a hash of the task id) kept out of "
        "training to measure a held-out loss beside the training loss; 0 = none.",
    )
    heldout_max_examples: int = Field(
        default=64,
        ge=1,
        description="At most this many held-out examples (the loss costs a forward pass each).",
    )
    eval_steps: int = Field(
        default=50, ge=1, description="Held-out loss every this many optimizer steps (and at the last one)."
    )
    max_length: int = Field(
        default=2048, ge=8, description="Longest sequence in tokens; longer examples keep their start."
    )
    sampling: Literal["group_by_length", "random"] = Field(
        default="group_by_length",
        description="Order of examples: group_by_length batches examples of similar length (shuffled "
        "mega-batches; far less padding when lengths vary), random shuffles them one by one.",
    )
    repeat: dict[str, int] = Field(
        default_factory=dict,
        description="Times each example of a family appears in the training set, e.g. {code: 3}: "
        "a family short of examples gets more of the steps without collecting more (others once; "
        "the held-out loss's examples are not repeated; a family the data lacks repeats nothing).",
    )
    packing: bool = Field(
        default=False,
        description="Pack whole examples into rows of max_length (TRL best-fit decreasing; padding-free, "
        "masks kept). Pays off on GPUs with flash_attention_2; slower on CPU.",
    )
    lora: LoraSettings | None = Field(default=None, description="LoRA adapters instead of full fine-tuning.")
    bf16: bool | Literal["auto"] = Field(
        default="auto", description="bf16 mixed precision; auto = on when a CUDA GPU supports it, off on CPU."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2", "flex_attention"] = Field(
        default="sdpa",
        description="Attention kernel the model is loaded with. With packing, each keeps packed examples "
        "apart (tests/train/test_packed_loss.py): sdpa and eager by a dense block-diagonal mask, "
        "flash_attention_2 (needs `flash-attn`) by per-example lengths, flex_attention (PyTorch's own, "
        "compiled; no extra package) by a sparse block mask. The fastest on one GPU is to be measured "
        "(bench/bench_sft_gpu.py --attn); sdpa until then.",
    )
    liger_kernel: bool | Literal["auto"] = Field(
        default="auto",
        description="Liger's fused linear cross-entropy (the LM head and the loss in chunks, the logits "
        "never held; trained positions only) and its RMSNorm, RoPE and SwiGLU kernels (Triton: CUDA "
        "only; needs `liger-kernel`, the gpu-train extra). auto = on where it can run; where it cannot "
        "(CPU, not installed) the run says why in one log line and uses fused_lm_head / head_positions "
        "instead. Full fine-tuning in one process only; to be measured against fused_lm_head on a GPU.",
    )
    fused_lm_head: bool | Literal["auto"] = Field(
        default="auto",
        description="TRL's fused LM head: the loss, entropy and top-1 accuracy computed in chunks without "
        "materializing the logits (saves memory with large vocabularies; logs entropy and "
        "mean_token_accuracy). Off: the model's own loss (1.2-1.5x faster for the tiny CPU student). "
        "auto = on with CUDA, off on CPU.",
    )
    head_positions: Literal["trained", "all"] = Field(
        default="trained",
        description="Without the fused LM head, where the LM head runs: only at the positions whose next "
        "token is trained (the same loss; the prompt and observations, 42% of the demo's tokens, skip "
        "the vocabulary projection and its softmax: 1.05x tokens/s for the tiny CPU student, "
        "bench/bench_sft_head.py) or, all, at "
        "every position (the model's own forward and loss). Full fine-tuning in one process only; "
        "LoRA and multi-process runs use the model's own loss either way.",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in backward (memory for time; off for small models).",
    )
    deepspeed: str | None = Field(
        default=None,
        description="DeepSpeed JSON config (e.g. infra/accelerate/zero3.json); not needed when `accelerate "
        "launch` is given a DeepSpeed config.",
    )

    name: str = Field(default="sft", description="Artifact name of the fine-tuned model.")
    families: tuple[str, ...] | None = Field(
        default=None, description="Train only on examples of these task families; null = all."
    )

    @field_validator("repeat")
    @classmethod
    def _repeat_known_families_at_least_once(cls, value: dict[str, int]) -> dict[str, int]:
        from schemas.task import FAMILIES

        if unknown := sorted(set(value) - set(FAMILIES)):
            known = ", ".join(FAMILIES)
            raise ValueError(f"sft.repeat names unknown families {unknown}; task families are {known}")
        low = {family: n for family, n in value.items() if n < 1}
        if low:
            raise ValueError(f"sft repeat counts must be >= 1 (got {low}); drop a family with `families`")
        return value

    @model_validator(mode="after")
    def _one_plan(self) -> SFTStageConfig:
        if self.max_steps is None and self.time_budget_s is None:
            raise ValueError("give max_steps or time_budget_s (or both: the budget plans, max_steps caps it)")
        return self


class SFTRunConfig(SFTStageConfig, TrainRun):
    """One SFT run (``python -m coa.train.sft --config``): the stage's config (:class:`SFTStageConfig`)
    plus the model to start from, the output folder and the examples. The SFT step makes it from the
    stage's config; a run selects the examples of ``families`` as the step does (the same rows either
    way), and the fields only the stage reads (``name``, where it runs) are carried unchanged and never
    restart a resumed run."""

    data: str | None = Field(
        default=None,
        description="For `python -m coa.train.sft`: an sft.v1 artifact URI (local or s3://) or a "
        "Parquet file.",
    )
    table: str = Field(default="sft", description="Table of the `data` artifact holding the sft.v1 rows.")


class SFTResult(BaseModel):
    """What a successful run did; written to ``sft_result.json``."""

    model_config = ConfigDict(frozen=True)

    model_dir: str = Field(description="The final model and tokenizer (merged, for LoRA).")
    output_dir: str
    adapter_dir: str | None = Field(default=None, description="The LoRA adapter, if any.")
    steps_planned: int = Field(description="Optimizer steps of the whole plan (the schedule's length).")
    steps_run: int = Field(description="Optimizer steps taken in this call (the plan minus resumed steps).")
    start_step: int = Field(description="Global step resumed from (0 for a fresh run).")
    global_step: int
    final_loss: float | None = Field(description="Last logged training loss (mean over its logging window).")
    loss_curve: list[tuple[int, float]] = Field(
        description="(global step, loss) of every log, resumed ones too."
    )
    heldout_loss_curve: list[tuple[int, float]] = Field(
        default_factory=list, description="(global step, loss per trained token) on the held-out examples."
    )
    n_heldout: int = Field(default=0, description="Examples kept out of training for the held-out loss.")
    overfit_warning: str | None = Field(
        default=None,
        description="Set when the held-out loss rose while the training loss fell (memorising).",
    )
    tokens_seen: int = Field(description="Non-padding input tokens over the whole run (resumed ones too).")
    session_tokens: int = Field(description="Non-padding input tokens in this call.")
    trained_tokens: int = Field(description="Tokens with a label (loss) in this call.")
    train_runtime_s: float = Field(description="Wall time of the training loop in this call.")
    tokens_per_s: float = Field(description="session_tokens / train_runtime_s.")
    n_examples: int = Field(description="sft.v1 rows given.")
    n_truncated: int = Field(description="Examples cut to max_length.")
    n_dropped: int = Field(description="Examples with no trained token left (not trained on).")
    n_rows: int = Field(description="Rows of the training dataset (packed rows when packing).")
    packing: bool
    bf16: bool
    device: str
    device_name: str | None = Field(
        default=None,
        description="The GPU's name, or the CPU's model and the threads torch trained with (results "
        "written before 2026-11-28 have none).",
    )
    lora: bool
    time_budget_s: float | None = None
    calibrated_step_s: float | None = Field(default=None, description="Seconds per optimizer step measured.")
    loss_curve_png: str
    peak_gpu_memory_gib: float | None = Field(
        default=None, description="Most GPU memory allocated by this process's tensors (CUDA runs)."
    )


SFT = Recipe(
    name="sft",
    title="SFT",
    module="coa.train.sft",
    plan_file="sft_plan.json",
    result_file="sft_result.json",
    data_field="data",
    data_file="examples.parquet",
    resume_free=RESUME_FREE_FIELDS,
    error=SFTError,
    step_count_error=StepCountError,
    logger="coa.train.sft",
)
"""Supervised fine-tuning as a recipe of the trainer kit."""
