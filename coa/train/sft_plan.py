"""The SFT plan: how many optimizer steps a run takes, from ``max_steps`` or a time budget.

With ``max_steps`` the plan is that number. With ``time_budget_s`` a throwaway trainer measures
the step time on a copy of the model before training (:func:`calibrate_step_time`), the first
plan is as many steps as fit in the budget (at most ``max_steps``), and the trainer is built for
``HEADROOM`` times more so :class:`coa.kit.budget.TimeBudget` can re-plan while training from the
recent speed and end on time; the learning-rate schedule spans the plan in force. A resumed run
keeps the plan of its checkpoint (``sft_plan.json`` and the checkpoint's ``trainer_state.json``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from coa.kit.budget import HEADROOM, StepPlan, TimeBudget
from coa.kit.ranks import broadcast_from_rank0, world_size
from coa.kit.run import TRAINER_STATE, RunStart
from coa.train.config import SFT, SFTError, SFTRunConfig
from coa.train.sft_trainer import CoaSFTTrainer

log = logging.getLogger(SFT.logger)

CALIBRATION_WARMUP = 5
"""Optimizer steps the calibration runs before it starts timing."""


@dataclasses.dataclass
class Plan:
    """The steps a run is built for, the time budget that re-plans them (if any), the step time
    measured for it (if measured), and the budget's first plan."""

    max_steps: int
    budget: TimeBudget | None
    calibrated_step_s: float | None

    @property
    def steps(self) -> int:
        """The plan in force (the budget's, once it has re-planned)."""
        return self.budget.plan.steps if self.budget is not None else self.max_steps

    def saved(self, config: SFTRunConfig) -> dict[str, Any]:
        """What ``sft_plan.json`` holds besides the config."""
        return {
            "max_steps": self.max_steps,
            "calibrated_step_s": self.calibrated_step_s,
            "time_budget": config.time_budget_s,
            "first_plan": self.budget.first_plan if self.budget else self.max_steps,
        }


def plan_steps(trainer: Any, config: SFTRunConfig, start: RunStart) -> Plan:
    """The plan of a run: its checkpoint's when resuming, else ``max_steps`` or a calibrated budget.

    The trainer is set to it (``args.max_steps``, the budget's callback and schedule).
    """
    budget: TimeBudget | None = None
    calibrated: float | None = None
    if start.plan is not None:
        max_steps = int(start.plan["max_steps"])
        calibrated = start.plan.get("calibrated_step_s")
        if start.plan.get("time_budget") and start.last is not None:  # keep the plan in force there
            steps = int(json.loads((start.last / TRAINER_STATE).read_text())["max_steps"])
            budget_s = float(start.plan["time_budget"])
            budget = TimeBudget(budget_s, StepPlan(steps), cap=max_steps, replan=False, logger=SFT.logger)
    elif config.time_budget_s is None:
        assert config.max_steps is not None
        max_steps = config.max_steps
    else:
        calibrated = calibrate_step_time(trainer, config)
        cap = config.max_steps or math.inf
        first = int(max(1, min(config.time_budget_s // calibrated, cap)))
        max_steps = int(min(math.ceil(first * HEADROOM), cap))
        budget = TimeBudget(config.time_budget_s, StepPlan(first), cap=max_steps, logger=SFT.logger)
        log.info("time budget %.0f s at %.3f s/step: planning %d steps, re-planned on the way "
                 "(at most %d)", config.time_budget_s, calibrated, first, max_steps)  # fmt: skip
    trainer.args.max_steps = max_steps
    if budget is not None:
        trainer.add_callback(budget)
        trainer.coa_step_plan = budget.plan
    return Plan(max_steps, budget, calibrated)


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
    :class:`coa.kit.budget.TimeBudget` corrects while training. The model being trained is
    untouched and the seed is reset afterwards. The copy doubles the model's memory for a moment:
    the time budget is meant for small runs (the CPU demo); give ``max_steps`` otherwise. Under
    several ranks every rank runs the copy (its steps are collectives) and all take rank 0's time
    (checked under DDP on CPU ranks; refused under DeepSpeed, whose ZeRO-3 partitions the model).
    """
    import copy
    import tempfile

    from transformers import set_seed

    if world_size() > 1 and getattr(trainer, "is_deepspeed_enabled", False):
        raise SFTError(
            "time_budget_s under DeepSpeed on several ranks: the calibration trains a copy of the model, "
            "which ZeRO-3 holds partitioned; give sft.max_steps instead (or train with ddp.yaml / fsdp2.yaml)"
        )
    indices, n_steps = calibration_order(trainer, config)
    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="coa-sft-calibration-") as tmp:
        args = dataclasses.replace(
            trainer.args,
            output_dir=tmp,
            max_steps=n_steps,
            save_strategy="no",
            train_sampling_strategy="sequential",  # the picked steps, in the order given
            dataset_kwargs={"skip_prepare_dataset": True},  # already encoded (and packed)
        )
        probe = CoaSFTTrainer(
            model=copy.deepcopy(trainer.model),
            args=args,
            train_dataset=trainer.train_dataset.select(indices),
            processing_class=trainer.processing_class,
            callbacks=[timer],
        )
        probe.remove_callback(PrinterCallback)
        probe.coa_step_tokens = timer.tokens
        probe.coa_fused_lm_head = trainer.coa_fused_lm_head
        probe.coa_trained_positions_head = trainer.coa_trained_positions_head
        probe.coa_liger = trainer.coa_liger
        probe.train()
        del probe
    set_seed(config.seed)
    ends = timer.ends[CALIBRATION_WARMUP - 1 :]
    seconds = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    tokens = [float(t) for t in timer.step_tokens[CALIBRATION_WARMUP:]]
    measured = step_seconds_at(tokens, seconds, mean_step_tokens(trainer, config))
    return broadcast_from_rank0(measured)  # every rank plans the same steps


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
    """Mean tokens one rank computes per optimizer step over one epoch of the run's batch order (the
    global batch's tokens shared by the ranks)."""
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
    return statistics.fmean(per_step) / world_size()  # each rank computes its share of a step


class StepTimer(TrainerCallback):
    """Wall-clock time of every optimizer step's end, and the tokens each step computed."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.tokens: list[int] = [0]  # the running step's count (the trainer adds to the last entry)
        self.step_tokens: list[int] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())
        self.step_tokens.append(self.tokens[-1])
        self.tokens.append(0)
