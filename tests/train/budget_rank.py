"""One rank of ``test_multi_rank.test_replans_follow_rank_0s_clock``: a :class:`TimeBudget` driven by
this rank's own (fake) clock in a gloo group. The ranks are forked from a fresh forkserver that has
imported this module (not from the test's xdist worker, whose threads and state a fork would copy)."""

from __future__ import annotations

import os
import traceback
from typing import Any

from coa.kit.budget import StepPlan, TimeBudget


def replan_on_rank(rank: int, world: int, store: str, seconds_per_step: float, out: Any) -> None:
    """Run the budget's callbacks step by step at ``seconds_per_step`` on this rank's clock until it stops
    the run; put ``(rank, stopped at, plan)`` on ``out``, or ``(rank, traceback)`` if it failed."""
    try:
        _replan(rank, world, store, seconds_per_step, out)
    except BaseException:
        out.put((rank, traceback.format_exc()))
        raise


def _replan(rank: int, world: int, store: str, seconds_per_step: float, out: Any) -> None:
    import torch.distributed as dist

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world)})
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        now = [0.0]

        def clock() -> float:
            return now[0]

        budget = TimeBudget(10.0, StepPlan(100), cap=100, clock=clock, replan_every=5)
        state = type("State", (), {"global_step": 0, "max_steps": 100})()
        control = type("Control", (), {"should_training_stop": False, "should_log": False})()
        args = type("Args", (), {"save_strategy": "no"})()
        budget.on_train_begin(args, state, control)
        while not control.should_training_stop and state.global_step < 100:
            now[0] += seconds_per_step  # this rank's own clock: rank 0 is 10x slower
            state.global_step += 1
            budget.on_step_end(args, state, control)
        out.put((rank, state.global_step, budget.plan.steps))
    finally:
        dist.destroy_process_group()
