"""Prefect tasks: the student model and its supervised fine-tuning (loss curve as Prefect artifacts)."""

from __future__ import annotations

import base64
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from transformers import TrainerCallback

from coa import io
from coa.train.stage import (
    LOSS_PNG,
    SFTStageConfig,
    StudentConfig,
    StudentModel,
    run_sft_stage,
    run_student_stage,
)


@task(name="student")
def student_task(cfg: StudentConfig, converted: io.ArtifactRef) -> StudentModel:
    """The base model: the configured one, or the tiny student built on the SFT texts."""
    student = run_student_stage(cfg, converted, io.Store())
    get_run_logger().info("student model: %s", student.ref.uri if student.ref else student.path)
    return student


class _LogProgress(TrainerCallback):
    """One line on the flow run's log per training log (loss, learning rate, step)."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs and "loss" in logs and state.is_world_process_zero:
            self.logger.info(
                "sft step %d/%d loss %.4f lr %.2e", state.global_step, state.max_steps, logs["loss"],
                logs.get("learning_rate", 0.0),
            )  # fmt: skip


@task(name="sft", log_prints=False)  # datasets prints bytecode while hashing
def sft_task(cfg: SFTStageConfig, base: StudentModel, converted: io.ArtifactRef) -> io.ArtifactRef:
    """Fine-tune ``base`` on the converted examples; publish the loss curve and the run's numbers."""
    logger = get_run_logger()
    ref, result = run_sft_stage(cfg, base, converted, io.Store(), callbacks=[_LogProgress(logger)])
    png = base64.b64encode(io.read_file(ref, LOSS_PNG)).decode()
    create_markdown_artifact(
        key="sft-loss-curve",
        markdown=f"# SFT loss\n\n![loss curve](data:image/png;base64,{png})\n\n"
        f"{result.global_step} optimizer steps, {result.tokens_seen:,} tokens, final loss "
        f"{result.final_loss:.4f}, {result.tokens_per_s:,.0f} tokens/s on {result.device}.\n\n"
        f"Model: `{ref.uri}`",
        description="Training loss of the SFT run",
    )
    every = max(1, len(result.loss_curve) // 50)
    create_table_artifact(
        key="sft-loss",
        table=[{"step": s, "loss": round(v, 5)} for s, v in result.loss_curve[::every]],
        description="Training loss per logged step (sampled)",
    )
    logger.info(
        "sft: %d steps (%d planned), final loss %s, %.0f tokens/s -> %s",
        result.global_step, result.steps_planned, result.final_loss, result.tokens_per_s, ref.uri,
    )  # fmt: skip
    return ref
