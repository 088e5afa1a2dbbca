"""A time budget that holds: re-plan the optimizer steps while training so the run ends on time.

A time-budgeted SFT run plans ``time_budget_s / calibrated step time`` steps before it starts, but
step time drifts during a long CPU run (measured in the 2-core demo, 2026-11-23: calibrated at
0.093 s/step, then 0.105-0.16 s/step, so 630-720 s plans ran 708-852 s). :class:`TimeBudget`
re-plans every ``REPLAN_EVERY`` steps from the speed of the last ``SPEED_WINDOW`` steps, or of the
last ``REPLAN_EVERY`` if those were slower (the first step, which carries set-up costs, is left
out): the steps left are what the time left allows, never more than the trainer was built for
(``HEADROOM`` times the first plan). The learning-rate schedule follows the plan in force (:func:`follow_plan`
stretches or shrinks its decay; the warm-up is untouched), so the decay ends where the run ends.

**Several ranks.** Every rank runs the callback, but the plan is decided on rank 0 and broadcast
(:func:`coa.kit.ranks.broadcast_from_rank0`) at each re-plan, so all ranks stop at the same
step: each rank's own clock would plan differently, and a rank that stops early leaves the others
waiting in a collective. The re-plans happen at the same steps on every rank (their timing depends on
the step count only), which the broadcast, a collective, needs.

The plan in force is ``state.max_steps``, saved in each checkpoint's ``trainer_state.json``; a
resumed run keeps the plan of its checkpoint and does not re-plan (the wall clock of an interrupted
run says nothing about the budget left).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from coa.kit.ranks import broadcast_from_rank0, rank

REPLAN_EVERY = 50
"""Optimizer steps between two re-plans."""
SPEED_WINDOW = 200
"""Recent optimizer steps whose mean duration sets the speed of a re-plan."""
HEADROOM = 1.25
"""The trainer is built for this many times the first plan, so a faster run can take more steps."""


class StepPlan:
    """The number of optimizer steps in force, shared by :class:`TimeBudget` and the schedule."""

    def __init__(self, steps: int) -> None:
        if steps < 1:
            raise ValueError(f"a plan needs at least one step, got {steps}")
        self.steps = steps


def follow_plan(scheduler: Any, plan: StepPlan, built_steps: int, warmup_steps: int) -> None:
    """Make a ``LambdaLR`` built for ``built_steps`` end its decay at ``plan.steps`` instead.

    A step after the warm-up is mapped onto the built schedule in proportion
    (``warmup + (step - warmup) * (built - warmup) / (plan - warmup)``), so any schedule type keeps
    its shape; the warm-up steps are unchanged.
    """
    span = built_steps - warmup_steps

    def stretched(factor: Callable[[int], float]) -> Callable[[int], float]:
        def lr_factor(step: int) -> float:
            left = plan.steps - warmup_steps
            if step <= warmup_steps or left <= 0 or span <= 0:
                return factor(step)
            return factor(min(built_steps, warmup_steps + (step - warmup_steps) * span / left))  # type: ignore[arg-type]

        return lr_factor

    scheduler.lr_lambdas = [stretched(f) for f in scheduler.lr_lambdas]


class TimeBudget(TrainerCallback):
    """Re-plans the steps so that training ends ``budget_s`` seconds after it began (see module doc).

    ``cap`` is the most steps the trainer was built for; ``replan=False`` only enforces ``plan``;
    ``logger`` is the recipe's (:attr:`coa.kit.recipe.Recipe.logger`), where the end of the run is said.
    """

    def __init__(
        self,
        budget_s: float,
        plan: StepPlan,
        cap: int,
        replan: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        replan_every: int | None = None,
        logger: str = "coa.kit",
    ) -> None:
        self.budget_s = budget_s
        self.plan = plan
        self.cap = cap
        self.replan = replan
        self.clock = clock
        self.replan_every = replan_every or REPLAN_EVERY
        self.first_plan = plan.steps
        self.replans = 0
        self._start = 0.0
        self._first_step = 0
        self._ends: deque[float] = deque(maxlen=SPEED_WINDOW + 1)
        self._ended = False
        self.log = logging.getLogger(logger)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = self.clock()
        self._first_step = int(state.global_step)
        self._ends.clear()  # speed from the first step's end on: the first step carries set-up costs
        state.max_steps = self.plan.steps

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = self.clock()
        self._ends.append(now)
        done = int(state.global_step) - self._first_step
        # A plan that has ended stays ended: transformers' own flow callback runs first and has
        # already stopped training at the step the plan in force ends on, so extending it here would
        # leave the run one plan short of the steps it reports.
        if self.replan and done % self.replan_every == 0 and state.global_step < self.plan.steps:
            self._replan(int(state.global_step), now)
        state.max_steps = self.plan.steps
        if state.global_step >= self.plan.steps:
            if not self._ended:
                self._ended = True
                self.log.info("rank %d: the time budget ends the run at step %d", rank(), state.global_step)
            control.should_training_stop = True
            control.should_log = True
            if str(getattr(args.save_strategy, "value", args.save_strategy)) == "steps":
                control.should_save = True

    def _replan(self, step: int, now: float) -> None:
        if len(self._ends) < 2:
            return
        # The slower of the window's mean and the last interval's: a slowdown shows at once, and
        # a plan cut short ends a little early rather than late.
        recent = min(self.replan_every, len(self._ends) - 1)
        per_step = max(
            (self._ends[-1] - self._ends[0]) / (len(self._ends) - 1),
            (self._ends[-1] - self._ends[-1 - recent]) / recent,
        )
        time_left = self.budget_s - (now - self._start)
        steps = step + max(0, int(time_left / per_step)) if per_step > 0 else self.plan.steps
        steps = min(self.cap, max(step, steps))
        steps = int(broadcast_from_rank0(steps))  # rank 0 decides: every rank stops at the same step
        if steps != self.plan.steps:
            self.log.debug(
                "time budget: %.0f s left at %.3f s/step (last %d steps): plan %d -> %d steps",
                time_left, per_step, len(self._ends) - 1, self.plan.steps, steps,
            )  # fmt: skip
            self.plan.steps = steps
            self.replans += 1
