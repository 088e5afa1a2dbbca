"""Supervised fine-tuning on ``sft.v1`` examples with TRL's ``SFTTrainer``.

``run_sft(examples, config, output_dir, resume)`` trains the model named by ``config.base_model``
(a local folder such as ``coa model init`` writes, or a hub id) and returns :class:`SFTResult`.
``python -m coa.train.sft --config resolved.yaml`` runs the same thing from a file, so a GPU worker
runs ``accelerate launch --config_file infra/accelerate/single_gpu.yaml -m coa.train.sft --config
resolved.yaml`` (or ``multi_gpu_zero3.yaml`` for DeepSpeed ZeRO-3); on a CPU it runs in process.

**Labels.** Built by :mod:`coa.train.data` through the format module: ``-100`` on the prompt and on
every observation segment (the tool output the environment injects), the trajectory and the
assistant's end-of-turn token trained. The trainer gets a pre-tokenized dataset of ``input_ids`` +
``labels``, which TRL 1.16 uses as is (no chat template or mask of its own is applied). The loss is
TRL's fused LM head (chunked; no full logits in memory; logs entropy and token accuracy) on CUDA,
and the model's own causal-LM loss on CPU, where it is 1.2-1.5x faster for the tiny student
(``fused_lm_head``).

**Packing** (``packing: true``) uses TRL's best-fit-decreasing packing (``bfd``) of whole examples
(already cut to ``max_length``), which is padding-free: each packed row keeps the ``labels`` of its
examples, the collator concatenates the rows of a batch into one sequence with per-example
``position_ids`` (restarting at 0) and no attention mask, and the model derives a block-diagonal
causal mask from those position ids, so no example attends to another and no loss crosses a
boundary (the first label of each example is ``-100``). TRL's ``wrapped`` strategy cuts examples
mid-sequence and is not offered.
Without flash-attention the block-diagonal mask is dense, quadratic in ``batch_size * max_length``:
on CPU packing is ~3x slower per token than plain padded batches, so pack on GPUs only.

**Plan and its guard.** The plan is a number of optimizer steps: ``max_steps``, or, with
``time_budget_s``, as many steps as fit in the budget at the speed a throwaway trainer measures on
a copy of the model (``calibration_steps`` real steps) before training, re-planned while training
from the recent speed so the run ends on time (:mod:`coa.train.budget`); the learning-rate schedule
spans the plan in force. The plan is stored in ``sft_plan.json``. A run that ends with a different
number of optimizer steps than planned (a callback or signal stopped it, a trainer quirk added one)
raises :class:`StepCountError` instead of reporting success, and no final model is written.

**Checkpoints and resume.** The trainer saves ``checkpoints/checkpoint-N`` every ``save_steps``
(model, optimizer, scheduler, RNG, trainer state) and at the end. ``resume=True`` continues from
the last complete checkpoint (global step, schedule, data order, RNG and loss history continue: a
killed and resumed run ends with the same weights as an uninterrupted one); with no checkpoint it
starts afresh; when the last checkpoint is already the final step, it loads it and trains no more
(``Trainer.train`` would take one extra step there). A fresh run refuses an output folder that
already holds checkpoints, and a resumed run refuses a config that changes the training itself.

**Outputs** in ``output_dir``: ``model/`` (the final model and tokenizer; for LoRA the merged model,
the adapter in ``adapter/``), ``loss_curve.png``, ``sft_result.json``, ``sft_plan.json``,
``checkpoints/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import SFTTrainer

from coa.train.budget import HEADROOM, StepPlan, TimeBudget, follow_plan
from coa.train.config import (
    RESUME_FREE_FIELDS,
    LoraSettings,
    SFTError,
    SFTResult,
    SFTRunConfig,
    StepCountError,
)
from coa.train.data import EncodedExamples, encode_examples

log = logging.getLogger("coa.train.sft")

CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
ADAPTER_DIR = "adapter"
PLAN_FILE = "sft_plan.json"
RESULT_FILE = "sft_result.json"
LOSS_PNG = "loss_curve.png"
TRAINER_STATE = "trainer_state.json"
CALIBRATION_WARMUP = 5
"""Optimizer steps the calibration runs before it starts timing."""


# -- the run ----------------------------------------------------------------------------------------


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
    out = _output_dir(config, output_dir)
    ckpt_dir = out / CHECKPOINTS_DIR
    last = last_checkpoint(ckpt_dir)
    if last is not None and not resume:
        raise SFTError(
            f"{ckpt_dir} already holds checkpoints (last: {last.name}); pass resume=True to continue that "
            "run or use an empty output folder"
        )
    plan = _read_plan(out) if resume and last is not None else None
    if plan is not None:
        _check_resumable(plan["config"], config)
    elif last is not None:
        raise SFTError(f"{out / PLAN_FILE} is missing: cannot tell what plan {last} belongs to")

    built = build_trainer(examples, config, out, max_steps=plan["max_steps"] if plan else None,
                          callbacks=callbacks)  # fmt: skip
    trainer, counter = built.trainer, built.counter
    calibrated_step_s = plan.get("calibrated_step_s") if plan else None
    budget: TimeBudget | None = None
    if plan is not None:
        max_steps = int(plan["max_steps"])
        if plan.get("time_budget") and last is not None:  # keep the plan in force at the checkpoint
            steps = int(json.loads((last / TRAINER_STATE).read_text())["max_steps"])
            budget = TimeBudget(float(plan["time_budget"]), StepPlan(steps), cap=max_steps, replan=False)
    elif config.time_budget_s is None:
        assert config.max_steps is not None
        max_steps = config.max_steps
    else:
        calibrated_step_s = calibrate_step_time(trainer, config)
        cap = config.max_steps or math.inf
        first = int(max(1, min(config.time_budget_s // calibrated_step_s, cap)))
        max_steps = int(min(math.ceil(first * HEADROOM), cap))
        budget = TimeBudget(config.time_budget_s, StepPlan(first), cap=max_steps)
        log.info("time budget %.0f s at %.3f s/step: planning %d steps, re-planned on the way "
                 "(at most %d)", config.time_budget_s, calibrated_step_s, first, max_steps)  # fmt: skip
    trainer.args.max_steps = max_steps
    if budget is not None:
        trainer.add_callback(budget)
        trainer.coa_step_plan = budget.plan
    if plan is None and trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        _write_json(out / PLAN_FILE, {"max_steps": max_steps, "calibrated_step_s": calibrated_step_s,
                                      "time_budget": config.time_budget_s,
                                      "first_plan": budget.first_plan if budget else max_steps,
                                      "config": config.model_dump(mode="json")})  # fmt: skip

    start_step = checkpoint_step(last) if last is not None else 0
    t0 = time.perf_counter()
    if last is not None and start_step >= (budget.plan.steps if budget is not None else max_steps):
        # Finished before (e.g. killed while saving the final model). Trainer.train would take one
        # more step here, so load the final checkpoint instead of training.
        _load_finished(trainer, last)
        counter.start_step, counter.start_tokens = start_step, int(trainer.state.num_input_tokens_seen)
    else:
        trainer.train(resume_from_checkpoint=str(last) if last is not None else None)
    runtime = time.perf_counter() - t0

    state = trainer.state
    if budget is not None:
        if budget.replans:
            log.info("time budget: planned %d steps, re-planned %d times to %d", budget.first_plan,
                     budget.replans, budget.plan.steps)  # fmt: skip
        max_steps = budget.plan.steps
    expected = max_steps - start_step
    if counter.steps != expected or state.global_step != max_steps:
        raise StepCountError(
            f"SFT took {counter.steps} optimizer steps in this run but the plan was {expected} (global step "
            f"{state.global_step} of {max_steps}, resumed from {start_step}); not reporting success. The "
            f"checkpoints in {ckpt_dir} are kept; no final model was written."
        )
    return _finish(built, config, out, max_steps, start_step, runtime, calibrated_step_s)


@dataclasses.dataclass
class BuiltTrainer:
    """A ready ``SFTTrainer`` and what went into it (see :func:`build_trainer`)."""

    trainer: Any
    encoded: EncodedExamples
    counter: Any
    bf16: bool
    device: str
    n_heldout: int = 0


def build_trainer(
    examples: pa.Table,
    config: SFTRunConfig,
    output_dir: str | Path,
    max_steps: int | None = None,
    callbacks: Sequence[Any] = (),
) -> BuiltTrainer:
    """The ``SFTTrainer`` of a run (dataset encoded and, with packing, packed), not yet trained."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig

    cuda = torch.cuda.is_available()
    bf16 = bool(cuda and torch.cuda.is_bf16_supported()) if config.bf16 == "auto" else bool(config.bf16)
    fused_lm_head = cuda if config.fused_lm_head == "auto" else config.fused_lm_head
    scheduler: str = config.lr_scheduler
    scheduler_kwargs: dict[str, Any] = {}
    if scheduler == "cosine" and config.min_lr_ratio > 0:
        scheduler, scheduler_kwargs = "cosine_with_min_lr", {"min_lr_rate": config.min_lr_ratio}
    # The arguments come first: under DeepSpeed ZeRO-3 they make from_pretrained load the weights sharded.
    args = SFTConfig(
        output_dir=str(Path(output_dir) / CHECKPOINTS_DIR),
        max_steps=max_steps or config.max_steps or 1,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accumulation,
        learning_rate=config.learning_rate,
        lr_scheduler_type=scheduler,
        lr_scheduler_kwargs=scheduler_kwargs,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        adam_beta1=config.adam_beta1,
        adam_beta2=config.adam_beta2,
        max_grad_norm=config.max_grad_norm,
        max_length=config.max_length,
        packing=config.packing,
        train_sampling_strategy=config.sampling,
        packing_strategy="bfd",  # whole examples; never "wrapped", which cuts them mid-sequence
        activation_checkpointing=config.gradient_checkpointing,
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        deepspeed=config.deepspeed,
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_first_step=True,
        include_num_input_tokens_seen="non_padding",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if config.packing and config.attn_implementation != "flash_attention_2":
        log.warning(
            "packing with %s attention: each batch is one sequence with a dense block-diagonal mask, "
            "quadratic in batch_size * max_length (measured 3x slower per token than unpacked on CPU); "
            "pack with flash_attention_2 on a GPU",
            config.attn_implementation,
        )
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_rows, heldout_rows = split_heldout(examples, config.heldout_fraction, config.heldout_max_examples)
    encoded = encode_examples(train_rows, tokenizer, config.max_length)
    heldout = encode_examples(heldout_rows, tokenizer, config.max_length) if heldout_rows.num_rows else None
    model = AutoModelForCausalLM.from_pretrained(
        config.base_model, dtype=torch.float32, attn_implementation=config.attn_implementation
    )
    peft_config = _peft_config(config.lora) if config.lora is not None else None
    counter = _StepCounter()
    trainer = _CoaSFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(encoded.as_columns()),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[counter, _LogLastStep(), _LogToLogger(), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # logs go to the `coa.train.sft` logger instead
    trainer.coa_fused_lm_head = fused_lm_head
    if heldout is not None and heldout.input_ids:
        trainer.add_callback(_HeldoutLoss(trainer, heldout, config.eval_steps, config.batch_size))
    n_heldout = len(heldout.input_ids) if heldout is not None else 0
    return BuiltTrainer(trainer, encoded, counter, bf16, str(args.device), n_heldout)


def split_heldout(examples: pa.Table, fraction: float, max_examples: int) -> tuple[pa.Table, pa.Table]:
    """``(train, held-out)``: whole tasks, in the order of a hash of their id, until the held-out set
    holds ``fraction`` of the examples (at most ``max_examples``; at least one when ``fraction > 0``
    and two or more tasks). Deterministic, so a resumed run holds out the same examples."""
    import hashlib

    import pyarrow.compute as pc

    task_ids = examples.column("task_id").to_pylist()
    tasks = sorted(set(task_ids), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    target = min(max_examples, round(fraction * len(task_ids)))
    if fraction > 0 and len(tasks) > 1:
        target = max(target, 1)
    per_task = {t: task_ids.count(t) for t in tasks} if target else {}
    chosen: set[str] = set()
    taken = 0
    for task in tasks[:-1]:  # the last task always trains
        if taken >= target:
            break
        chosen.add(task)
        taken += per_task[task]
    mask = pc.is_in(examples.column("task_id"), pa.array(sorted(chosen), pa.string()))
    return examples.filter(pc.invert(mask)), examples.filter(mask)


def overfit_warning(train: Sequence[tuple[int, float]], heldout: Sequence[tuple[int, float]]) -> str | None:
    """A warning when the held-out loss rose (10%+ over its best) while the training loss fell."""
    if len(heldout) < 3 or not train:
        return None
    best_step, best = min(heldout, key=lambda p: p[1])
    last_step, last = heldout[-1]
    if last <= best * 1.1 or last_step == best_step:
        return None

    def train_at(step: int) -> float:
        return min(train, key=lambda p: abs(p[0] - step))[1]

    if train_at(last_step) >= train_at(best_step):
        return None
    return (
        f"held-out loss rose from {best:.4f} (step {best_step}) to {last:.4f} (step {last_step}) while the "
        f"training loss fell from {train_at(best_step):.4f} to {train_at(last_step):.4f}: the model is "
        "memorising its examples; use fewer steps, more data or regularisation"
    )


def calibrate_step_time(trainer: Any, config: SFTRunConfig) -> float:
    """Seconds per optimizer step of the planned run, from a throwaway trainer on a copy of the model.

    Step time follows the tokens a step computes (padded to the longest example of each batch, or
    the packed rows' tokens) plus a fixed cost per step, and batches differ (``group_by_length`` puts
    the longest first). So the copy runs ``calibration_steps`` real optimizer steps picked evenly
    across one epoch of the run's own batch order (:func:`calibration_order`; same data, collator,
    batch, accumulation, optimizer; no checkpoints), after ``CALIBRATION_WARMUP`` steps on the longest
    batches (the first steps set up kernels and buffers). A line ``seconds = a + b * tokens`` fitted
    to the timed steps gives the step time at the epoch's mean tokens per step. It is the first plan
    only: on the 2-core CPU demo step time drifts by 10-50% during a run, which
    :class:`coa.train.budget.TimeBudget` corrects while training. The model being trained is
    untouched and the seed is reset afterwards. The copy doubles the model's memory for a moment:
    the time budget is meant for small single-process runs (the CPU demo); give ``max_steps``
    otherwise.
    """
    import copy
    import tempfile

    from transformers import set_seed

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SFTError("time_budget_s needs a single-process run; give max_steps for distributed training")
    indices, n_steps = calibration_order(trainer, config)
    timer = _StepTimer()
    with tempfile.TemporaryDirectory(prefix="coa-sft-calibration-") as tmp:
        args = dataclasses.replace(
            trainer.args,
            output_dir=tmp,
            max_steps=n_steps,
            save_strategy="no",
            train_sampling_strategy="sequential",  # the picked steps, in the order given
            dataset_kwargs={"skip_prepare_dataset": True},  # already encoded (and packed)
        )
        probe = _CoaSFTTrainer(
            model=copy.deepcopy(trainer.model),
            args=args,
            train_dataset=trainer.train_dataset.select(indices),
            processing_class=trainer.processing_class,
            callbacks=[timer],
        )
        probe.remove_callback(PrinterCallback)
        probe.coa_step_tokens = timer.tokens
        probe.coa_fused_lm_head = trainer.coa_fused_lm_head
        probe.train()
        del probe
    set_seed(config.seed)
    ends = timer.ends[CALIBRATION_WARMUP - 1 :]
    seconds = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    tokens = [float(t) for t in timer.step_tokens[CALIBRATION_WARMUP:]]
    return step_seconds_at(tokens, seconds, mean_step_tokens(trainer, config))


def step_seconds_at(tokens: Sequence[float], seconds: Sequence[float], at_tokens: float) -> float:
    """Step time at ``at_tokens`` from timed steps: a least-squares line ``a + b * tokens``.

    Falls back to the timed steps' seconds per token times ``at_tokens`` when they all had the same
    size, or when the fit is not physical (a slope <= 0 or a negative fixed cost: noise on few steps).
    """
    if not tokens or len(tokens) != len(seconds):
        raise SFTError("calibration timed no steps: raise sft.calibration_steps")
    per_token = sum(seconds) / max(1.0, sum(tokens))
    if len(set(tokens)) < 2:
        return per_token * at_tokens
    slope, intercept = statistics.linear_regression(tokens, seconds)
    if slope <= 0 or intercept < 0:  # noise on too few steps: keep the proportional estimate
        return per_token * at_tokens
    return intercept + slope * at_tokens


def calibration_order(trainer: Any, config: SFTRunConfig) -> tuple[list[int], int]:
    """Example indices the calibration trains on, in order, and its number of optimizer steps.

    ``CALIBRATION_WARMUP`` steps from the start of the run's own order (the longest batches under
    ``group_by_length``), then ``calibration_steps`` steps picked evenly across the whole epoch.
    """
    order = list(iter(trainer._get_train_sampler(trainer.train_dataset)))
    per_step = config.batch_size * config.grad_accumulation
    steps = [order[i : i + per_step] for i in range(0, len(order), per_step)]
    steps = [s for s in steps if len(s) == per_step] or steps
    n = min(config.calibration_steps, len(steps))
    picked = [steps[round(k * (len(steps) - 1) / max(1, n - 1))] for k in range(n)]
    warmup = [steps[k % len(steps)] for k in range(CALIBRATION_WARMUP)]
    chosen = warmup + picked
    return [i for step in chosen for i in step], len(chosen)


def mean_step_tokens(trainer: Any, config: SFTRunConfig) -> float:
    """Mean tokens computed per optimizer step over one epoch of the trainer's own batch order."""
    lengths = [len(ids) for ids in trainer.train_dataset["input_ids"]]
    order = list(iter(trainer._get_train_sampler(trainer.train_dataset)))
    size = config.batch_size
    batches = [order[i : i + size] for i in range(0, len(order), size)]
    if config.packing:
        tokens = [sum(lengths[j] for j in b) for b in batches]
    else:
        tokens = [len(b) * max(lengths[j] for j in b) for b in batches]
    per_step = [
        sum(tokens[i : i + config.grad_accumulation]) for i in range(0, len(tokens), config.grad_accumulation)
    ]
    return statistics.fmean(per_step)


def last_checkpoint(ckpt_dir: str | Path) -> Path | None:
    """The highest-step complete checkpoint (its trainer state, written last, exists), or None."""
    folder = Path(ckpt_dir)
    if not folder.is_dir():
        return None
    done = [p for p in folder.glob("checkpoint-*") if p.is_dir() and (p / TRAINER_STATE).is_file()]
    return max(done, key=checkpoint_step, default=None)


def loss_curve(log_history: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, loss)`` of every training log entry, in step order, one per step."""
    points = {int(e["step"]): float(e["loss"]) for e in log_history if "loss" in e and "step" in e}
    return sorted(points.items())


def heldout_curve(log_history: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, held-out loss)`` of every held-out evaluation, in step order."""
    points = {int(e["step"]): float(e["heldout_loss"]) for e in log_history if "heldout_loss" in e}
    return sorted(points.items())


def plot_loss_curve(
    points: Sequence[tuple[int, float]],
    path: str | Path,
    title: str = "SFT loss",
    heldout: Sequence[tuple[int, float]] = (),
) -> Path:
    """Write the loss curve (and the held-out loss) as a PNG (matplotlib's Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if points:
        steps, losses = zip(*points, strict=True)
        ax.plot(steps, losses, marker="." if len(points) < 50 else None, linewidth=1.2, label="training")
        if min(losses) > 0 and max(losses) / min(losses) > 20:
            ax.set_yscale("log")
    if heldout:
        steps, losses = zip(*heldout, strict=True)
        ax.plot(steps, losses, marker="o", linewidth=1.6, color="#d62728", label="held-out")
        ax.legend(loc="upper right")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (per trained token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path))
    return Path(path)


# -- internals --------------------------------------------------------------------------------------


def _finish(
    built: BuiltTrainer,
    config: SFTRunConfig,
    out: Path,
    max_steps: int,
    start_step: int,
    runtime: float,
    calibrated_step_s: float | None,
) -> SFTResult:
    import torch

    trainer = built.trainer
    model_dir, adapter_dir = out / MODEL_DIR, None
    if config.lora is not None:
        adapter_dir = out / ADAPTER_DIR
        trainer.save_model(str(adapter_dir))
        if trainer.is_world_process_zero():
            merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
            merged.save_pretrained(str(model_dir))
            trainer.processing_class.save_pretrained(str(model_dir))
    else:
        trainer.save_model(str(model_dir))
    state = trainer.state
    session_tokens = int(state.num_input_tokens_seen) - built.counter.start_tokens
    trained = torch.as_tensor(trainer.coa_trained_tokens, device=trainer.args.device).reshape(1)
    trained_tokens = int(trainer.accelerator.gather(trained).sum().item())
    points = loss_curve(state.log_history)
    heldout = heldout_curve(state.log_history)
    warning = overfit_warning(points, heldout)
    if warning:
        log.warning("sft: %s", warning)
    png = out / LOSS_PNG
    result = SFTResult(
        model_dir=str(model_dir),
        output_dir=str(out),
        adapter_dir=str(adapter_dir) if adapter_dir else None,
        steps_planned=max_steps,
        steps_run=built.counter.steps,
        start_step=start_step,
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
        lora=config.lora is not None,
        time_budget_s=config.time_budget_s,
        calibrated_step_s=calibrated_step_s,
        loss_curve_png=str(png),
        peak_gpu_memory_gib=(
            round(torch.cuda.max_memory_allocated() / 2**30, 3) if torch.cuda.is_available() else None
        ),
    )
    if trainer.is_world_process_zero():
        title = f"SFT loss: {state.global_step} steps, {result.tokens_seen:,} tokens"
        plot_loss_curve(points, png, title=title, heldout=heldout)
        _write_json(out / RESULT_FILE, result.model_dump(mode="json"))
    return result


def _load_finished(trainer: Any, checkpoint: Path) -> None:
    from transformers import TrainerState

    if trainer.is_deepspeed_enabled:
        raise SFTError(
            f"{checkpoint} is the final step of the plan; under DeepSpeed export its weights with "
            "zero_to_fp32.py instead of resuming"
        )
    trainer._load_from_checkpoint(str(checkpoint))
    trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE))


def _peft_config(lora: LoraSettings) -> Any:
    try:
        from peft import LoraConfig
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SFTError("lora needs the `peft` package (pip install peft)") from e
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


class _CoaSFTTrainer(SFTTrainer):
    """``SFTTrainer`` that counts the tokens it trains on (labels other than -100); fused head optional.

    Without the fused LM head (``coa_fused_lm_head`` false) the loss is ``transformers.Trainer``'s:
    the model's own causal-LM loss over the same labels (no entropy / token-accuracy metrics).
    """

    coa_trained_tokens: Any = 0  # a device tensor once counting starts (no host sync per step)
    coa_step_tokens: list[int] | None = None  # calibration: computed tokens added to the last entry
    coa_fused_lm_head: bool = True
    coa_step_plan: StepPlan | None = None  # a time budget's plan: the schedule follows it

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        created = self.lr_scheduler is None
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if created and self.coa_step_plan is not None:
            if not hasattr(scheduler, "lr_lambdas"):
                raise SFTError(f"a time budget needs a LambdaLR schedule, got {type(scheduler).__name__}")
            warmup = self.args.get_warmup_steps(num_training_steps)
            follow_plan(scheduler, self.coa_step_plan, num_training_steps, warmup)
        return scheduler

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if model.training and "labels" in inputs:
            self.coa_trained_tokens = self.coa_trained_tokens + (inputs["labels"][..., 1:] != -100).sum()
            if self.coa_step_tokens is not None:
                self.coa_step_tokens[-1] += int(inputs["labels"].numel())
        if not self.coa_fused_lm_head:
            return Trainer.compute_loss(self, model, inputs, *args, **kwargs)
        return super().compute_loss(model, inputs, *args, **kwargs)


class _StepCounter(TrainerCallback):
    """Counts optimizer steps actually taken in this process (``on_step_end`` fires once per step).

    Also notes the global step and token count the loop started from (after a resumed state loads).
    """

    def __init__(self) -> None:
        self.steps = 0
        self.start_step = 0
        self.start_tokens = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start_step = int(state.global_step)
        self.start_tokens = int(state.num_input_tokens_seen)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps += 1


class _StepTimer(TrainerCallback):
    """Wall-clock time of every optimizer step's end, and the tokens each step computed."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.tokens: list[int] = [0]  # the running step's count (the trainer adds to the last entry)
        self.step_tokens: list[int] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())
        self.step_tokens.append(self.tokens[-1])
        self.tokens.append(0)


class _LogLastStep(TrainerCallback):
    """Log the final step too, so the loss curve ends where training ended."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= state.max_steps:
            control.should_log = True


class _LogToLogger(TrainerCallback):
    """Training logs as one line each on the ``coa.train.sft`` logger (the progress bars are off)."""

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs and state.is_world_process_zero:
            shown = {k: round(v, 5) if isinstance(v, float) else v for k, v in logs.items()}
            log.info("step %d/%d %s", state.global_step, state.max_steps, json.dumps(shown, sort_keys=True))


class _HeldoutLoss(TrainerCallback):
    """Every ``every`` optimizer steps (and at the last), the mean loss per trained token on the
    held-out examples, appended to the trainer's log history (so it survives a resume)."""

    def __init__(self, trainer: Any, heldout: EncodedExamples, every: int, batch_size: int) -> None:
        self.trainer, self.heldout, self.every, self.batch_size = trainer, heldout, every, batch_size

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every and state.global_step < state.max_steps:
            return
        loss = self.loss()
        state.log_history.append({"step": state.global_step, "heldout_loss": round(loss, 6)})
        log.info("step %d held-out loss %.4f", state.global_step, loss)

    def loss(self) -> float:
        import torch

        model = self.trainer.model
        was_training = model.training
        model.eval()
        pad = self.trainer.processing_class.pad_token_id or 0
        total, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(self.heldout.input_ids), self.batch_size):
                ids = self.heldout.input_ids[start : start + self.batch_size]
                labels = self.heldout.labels[start : start + self.batch_size]
                width = max(len(x) for x in ids)
                batch = torch.tensor([x + [pad] * (width - len(x)) for x in ids], device=model.device)
                target = torch.tensor([y + [-100] * (width - len(y)) for y in labels], device=model.device)
                mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids], device=model.device)
                logits = model(input_ids=batch, attention_mask=mask).logits[:, :-1].float()
                shifted = target[:, 1:]
                losses = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    shifted.reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
                total += float(losses)
                count += int((shifted != -100).sum())
        if was_training:
            model.train()
        return total / max(1, count)


def checkpoint_step(path: Path) -> int:
    """The N of a ``checkpoint-N`` folder (-1 when the name has none)."""
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def _output_dir(config: SFTRunConfig, output_dir: str | Path | None) -> Path:
    chosen = output_dir if output_dir is not None else config.output_dir
    if chosen is None:
        raise SFTError("no output folder: pass output_dir or set output_dir in the config")
    return Path(chosen)


def _read_plan(out: Path) -> dict[str, Any] | None:
    path = out / PLAN_FILE
    return dict(json.loads(path.read_text())) if path.is_file() else None


def _check_resumable(saved: dict[str, Any], config: SFTRunConfig) -> None:
    now = config.model_dump(mode="json")
    changed = sorted(
        k for k in set(saved) | set(now) if k not in RESUME_FREE_FIELDS and saved.get(k) != now.get(k)
    )
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed)
        raise SFTError(f"cannot resume with a changed training config ({diffs}); use a new output folder")


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))
    tmp.replace(path)


# -- entry point ------------------------------------------------------------------------------------


def load_examples(data: str, table: str = "sft") -> pa.Table:
    """The ``sft.v1`` rows of an artifact URI, or of a loose Parquet file."""
    from coa import io

    if data.endswith(".parquet"):
        return io.read_parquet_file(data)
    return io.read_table(data, table)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coa.train.sft --config X.yaml [--data URI] [--output-dir DIR] [--resume] [k=v ...]``."""
    from coa.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="python -m coa.train.sft", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML with the SFTRunConfig fields")
    parser.add_argument("--data", help="sft.v1 artifact URI or Parquet file (overrides `data`)")
    parser.add_argument("--output-dir", help="output folder (overrides `output_dir`)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint if any")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. max_steps=200")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(ns.config, ns.overrides, model=SFTRunConfig)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    data = ns.data or config.data
    if data is None:
        print("no data: give --data or set `data` in the config", file=sys.stderr)
        return 2
    try:
        result = run_sft(load_examples(data, config.table), config, ns.output_dir, resume=ns.resume)
    except StepCountError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except SFTError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        _end_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        summary = result.model_dump(mode="json", exclude={"loss_curve"})
        summary["loss_curve_points"] = len(result.loss_curve)
        print(json.dumps(summary, indent=2, sort_keys=True))
    if not math.isfinite(result.final_loss or 0.0):
        print(f"error: the final loss is {result.final_loss}", file=sys.stderr)
        return 1
    return 0


def _end_process_group() -> None:
    """Under torchrun / accelerate: wait for every rank, then tear the group down before exit
    (a live gloo/NCCL group at interpreter shutdown can abort a rank with SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
