"""The time budget: the schedule follows the plan in force; re-plans from the recent speed end on time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import get_scheduler

from coa.kit.budget import StepPlan, TimeBudget, follow_plan


def _scheduler(total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(
        "cosine_with_min_lr", optimizer, num_warmup_steps=warmup, num_training_steps=total,
        scheduler_specific_kwargs={"min_lr_rate": 0.1},
    )  # fmt: skip
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)
    return scheduler


def test_schedule_follows_the_plan_in_force() -> None:
    built, warmup = 20, 2
    reference = _scheduler(built, warmup).lr_lambdas[0]
    scheduler = _scheduler(built, warmup)
    plan = StepPlan(built)
    follow_plan(scheduler, plan, built, warmup)
    factor = scheduler.lr_lambdas[0]
    assert [factor(s) for s in range(built + 1)] == [reference(s) for s in range(built + 1)]
    plan.steps = 11  # shrunk: the decay is squeezed into 9 steps after the warm-up
    assert [factor(s) for s in range(warmup + 1)] == [reference(s) for s in range(warmup + 1)]
    assert factor(11) == pytest.approx(reference(20)) == pytest.approx(0.1)
    assert factor(5) == pytest.approx(reference(8))
    plan.steps = 38  # stretched: the run may go on, more slowly decaying
    assert factor(20) == pytest.approx(reference(11))
    assert factor(38) == pytest.approx(0.1) and factor(50) == pytest.approx(0.1)  # never past the end


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _train(budget: TimeBudget, clock: FakeClock, step_seconds: list[float], limit: int) -> tuple[int, Any]:
    state = SimpleNamespace(global_step=0, max_steps=limit)
    args = SimpleNamespace(save_strategy="steps")
    control = SimpleNamespace(should_training_stop=False, should_log=False, should_save=False)
    budget.on_train_begin(args, state, control)
    while state.global_step < limit and not control.should_training_stop:
        clock.now += step_seconds[min(state.global_step, len(step_seconds) - 1)]
        state.global_step += 1
        budget.on_step_end(args, state, control)
    return state.global_step, control


def test_a_run_that_slows_down_is_re_planned_to_end_on_time() -> None:
    clock = FakeClock()
    budget = TimeBudget(10.0, StepPlan(100), cap=125, clock=clock, replan_every=5)  # planned at 0.1 s/step
    steps, control = _train(budget, clock, [0.1] * 40 + [0.2] * 1000, limit=125)
    assert (
        60 <= steps <= 75 and budget.plan.steps == steps and budget.replans > 0
    )  # 40 * 0.1 + 30 * 0.2 = 10 s
    assert 9.0 <= clock.now <= 10.0 + 5 * 0.2  # ends within one re-plan interval of the budget
    assert control.should_save and control.should_log  # the final step is saved and logged


def test_a_faster_run_takes_more_steps_up_to_the_cap() -> None:
    clock = FakeClock()
    budget = TimeBudget(10.0, StepPlan(100), cap=125, clock=clock, replan_every=5)
    steps, _ = _train(budget, clock, [0.05] * 1000, limit=125)
    assert steps == 125 == budget.plan.steps  # 200 would fit; the trainer was built for 125


def test_a_fixed_plan_is_enforced_but_not_changed() -> None:
    clock = FakeClock()
    budget = TimeBudget(10.0, StepPlan(30), cap=125, clock=clock, replan=False, replan_every=5)
    steps, _ = _train(budget, clock, [1.0] * 1000, limit=125)
    assert steps == 30 == budget.plan.steps and budget.replans == 0


def test_a_plan_needs_a_step() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        StepPlan(0)


def test_a_plan_that_has_ended_is_not_extended_after_transformers_stopped() -> None:
    """transformers' flow callback runs before ours and stops at the plan in force; a re-plan at that
    very step must not extend the plan (the run would end one plan short of what it reports)."""
    clock = FakeClock()
    budget = TimeBudget(10.0, StepPlan(100), cap=125, clock=clock, replan_every=5)
    state = SimpleNamespace(global_step=0, max_steps=125)
    args = SimpleNamespace(save_strategy="steps")
    control = SimpleNamespace(should_training_stop=False, should_log=False, should_save=False)
    budget.on_train_begin(args, state, control)
    seconds = [1.0] * 5 + [0.2] * 1000  # slow at first: cut to 10 steps at step 5; fast afterwards
    while not control.should_training_stop:
        clock.now += seconds[state.global_step]
        state.global_step += 1
        if state.global_step >= state.max_steps:  # what DefaultFlowCallback.on_step_end does first
            control.should_training_stop = True
        budget.on_step_end(args, state, control)
    assert state.global_step == budget.plan.steps == 10  # the steps run are the plan in force
