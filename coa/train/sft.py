"""Supervised fine-tuning on ``sft.v1`` examples with TRL's ``SFTTrainer``: the SFT recipe of the
trainer kit (:mod:`coa.kit`).

``run_sft(examples, config, output_dir, resume)`` trains the model named by ``config.base_model``
(a local folder such as ``coa model init`` writes, or a hub id) and returns :class:`SFTResult`.
``python -m coa.train.sft --config resolved.yaml`` runs the same thing from a file, so a GPU worker
runs ``accelerate launch --config_file infra/accelerate/single_gpu.yaml -m coa.train.sft --config
resolved.yaml`` (or ``multi_gpu_zero3.yaml`` for DeepSpeed ZeRO-3); on a CPU it runs in process.

The recipe's parts, one concern each:

* :mod:`coa.train.data`: the rows → ``input_ids`` + ``labels`` (``-100`` on the prompt and on
  every observation segment; the trajectory and the assistant's end-of-turn token trained);
* :mod:`coa.train.sft_trainer`: the ``SFTTrainer`` (packing, LoRA, fused LM head, held-out loss);
* :mod:`coa.train.sft_plan`: the number of optimizer steps, from ``max_steps`` or a calibrated
  time budget re-planned while training (:mod:`coa.kit.budget`);
* :mod:`coa.train.curves`: the loss curves, the overfitting warning, the PNG;
* this module: the run and its entry point, over the kit's checkpoints and resume checks,
  steps-run guard, callbacks, launch and command line.

**Plan and its guard.** The plan is stored in ``sft_plan.json``. A run that ends with a different
number of optimizer steps than planned raises :class:`StepCountError` instead of reporting success,
and no final model is written.

**Checkpoints and resume.** The trainer saves ``checkpoints/checkpoint-N`` every ``save_steps``
(model, optimizer, scheduler, RNG, trainer state) and at the end. ``resume=True`` continues from
the last complete checkpoint (global step, schedule, data order, RNG and loss history continue: a
killed and resumed run ends with the same weights as an uninterrupted one); with no checkpoint it
starts afresh; when the last checkpoint is already the final step, it loads it and trains no more.
A fresh run refuses an output folder that already holds checkpoints, and a resumed run refuses a
config that changes the training itself.

**Outputs** in ``output_dir``: ``model/`` (the final model and tokenizer; for LoRA the merged model,
the adapter in ``adapter/``), ``loss_curve.png``, ``sft_result.json``, ``sft_plan.json``,
``checkpoints/``.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.kit import entry
from coa.kit import run as kit
from coa.resources import device_name
from coa.train import curves
from coa.train.config import SFT, SFTResult, SFTRunConfig
from coa.train.data import select_examples
from coa.train.sft_plan import Plan, plan_steps
from coa.train.sft_trainer import BuiltTrainer, build_trainer

log = logging.getLogger(SFT.logger)

MODEL_DIR = kit.MODEL_DIR
ADAPTER_DIR = "adapter"
PLAN_FILE = SFT.plan_file
RESULT_FILE = SFT.result_file
LOSS_PNG = "loss_curve.png"


def run_sft(
    examples: pa.Table,
    config: SFTRunConfig,
    output_dir: str | Path | None = None,
    resume: bool = False,
    callbacks: Sequence[Any] = (),
) -> SFTResult:
    """Fine-tune on an ``sft.v1`` table; raise :class:`StepCountError` if the plan was not followed.

    ``callbacks`` are extra ``transformers.TrainerCallback`` objects (progress reporting, tests).
    """
    start = kit.open_run(SFT, config, output_dir, resume)
    resumed_steps = start.plan["max_steps"] if start.plan else None
    built = build_trainer(examples, config, start.out, max_steps=resumed_steps, callbacks=callbacks)
    plan = plan_steps(built.trainer, config, start)
    kit.write_plan(SFT, built.trainer, start, plan.saved(config), config)
    runtime = kit.train(SFT, built.trainer, start, plan.steps)
    budget = plan.budget
    if budget is not None and budget.replans:
        log.info("time budget: planned %d steps, re-planned %d times to %d", budget.first_plan,
                 budget.replans, budget.plan.steps)  # fmt: skip
    kit.check_steps(SFT, built.counter.steps, built.trainer, plan.steps, start)
    return _sft_result(built, config, start, plan, runtime)


def _sft_result(
    built: BuiltTrainer, config: SFTRunConfig, start: kit.RunStart, plan: Plan, runtime: float
) -> SFTResult:
    """The kit's end of a run with SFT's model (merged, for LoRA), result and loss curve."""
    import torch

    trainer, out = built.trainer, start.out
    adapter_dir = out / ADAPTER_DIR if config.lora is not None else None

    def save(trainer: Any, model_dir: Path) -> None:
        if adapter_dir is None:
            trainer.save_model(str(model_dir))
            return
        trainer.save_model(str(adapter_dir))
        if trainer.is_world_process_zero():
            merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
            merged.save_pretrained(str(model_dir))
            trainer.processing_class.save_pretrained(str(model_dir))

    def measure(model_dir: Path) -> SFTResult:
        state = trainer.state
        session_tokens = int(state.num_input_tokens_seen) - built.counter.start_tokens
        trained = torch.as_tensor(trainer.coa_trained_tokens, device=trainer.args.device).reshape(1)
        trained_tokens = int(trainer.accelerator.gather(trained).sum().item())
        points = curves.loss_curve(state.log_history)
        heldout = curves.heldout_curve(state.log_history)
        warning = curves.overfit_warning(points, heldout)
        if warning:
            log.warning("sft: %s", warning)
        return SFTResult(
            model_dir=str(model_dir),
            output_dir=str(out),
            adapter_dir=str(adapter_dir) if adapter_dir else None,
            steps_planned=plan.steps,
            steps_run=built.counter.steps,
            start_step=start.start_step,
            global_step=state.global_step,
            final_loss=points[-1][1] if points else None,
            loss_curve=points,
            heldout_loss_curve=heldout,
            n_heldout=built.n_heldout,
            overfit_warning=warning,
            tokens_seen=int(state.num_input_tokens_seen),
            session_tokens=session_tokens,
            trained_tokens=trained_tokens,
            train_runtime_s=round(runtime, 3),
            tokens_per_s=round(session_tokens / runtime, 1) if runtime > 0 else 0.0,
            n_examples=built.encoded.n_rows,
            n_truncated=built.encoded.n_truncated,
            n_dropped=built.encoded.n_dropped,
            n_rows=len(trainer.train_dataset),
            packing=config.packing,
            bf16=built.bf16,
            device=built.device,
            device_name=device_name(built.device),
            lora=config.lora is not None,
            time_budget_s=config.time_budget_s,
            calibrated_step_s=plan.calibrated_step_s,
            loss_curve_png=str(out / LOSS_PNG),
            peak_gpu_memory_gib=(
                round(torch.cuda.max_memory_allocated() / 2**30, 3) if torch.cuda.is_available() else None
            ),
        )

    def plot(result: SFTResult) -> None:
        title = f"SFT loss: {result.global_step} steps, {result.tokens_seen:,} tokens"
        curves.plot_loss_curve(result.loss_curve, result.loss_curve_png, title=title,
                               heldout=result.heldout_loss_curve)  # fmt: skip

    return kit.finish(SFT, trainer, start, measure, plot, save)


# -- entry point ------------------------------------------------------------------------------------


def load_examples(data: str, table: str = "sft") -> pa.Table:
    """The ``sft.v1`` rows of an artifact URI, or of a loose Parquet file."""
    from coa import io

    if data.endswith(".parquet"):
        return io.read_parquet_file(data)
    return io.read_table(data, table)


def _run(config: SFTRunConfig, output_dir: str | None, resume: bool) -> SFTResult:
    assert config.data is not None
    examples = select_examples(load_examples(config.data, config.table), config.families)
    return run_sft(examples, config, output_dir, resume=resume)


def _summary(result: SFTResult) -> dict[str, Any]:
    """What ``python -m coa.train.sft`` prints: the result, its loss curve as a count of points."""
    return result.model_dump(mode="json", exclude={"loss_curve"}) | {
        "loss_curve_points": len(result.loss_curve)
    }


def _unsound(result: SFTResult) -> str | None:
    return None if math.isfinite(result.final_loss or 0.0) else f"the final loss is {result.final_loss}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coa.train.sft --config X.yaml [--data URI] [--output-dir DIR] [--resume] [k=v ...]``."""
    return entry.main(
        SFT,
        argv,
        config_model=SFTRunConfig,
        run=_run,
        description="Supervised fine-tuning on sft.v1 examples (TRL SFTTrainer).",
        summary=_summary,
        unsound=_unsound,
    )


if __name__ == "__main__":
    sys.exit(main())
