"""The RL recipe's own trainer callbacks: the refill deadline and the entropy guard (the step
counter and the log lines are the trainer kit's, :mod:`coa.kit.callbacks`).

:class:`EntropyGuard` reads the mean token entropy TRL logs each step and stops the run when its
mean over the last few logged steps falls below the floor (the run then raises
:class:`~coa.rl.config.EntropyCollapse`).
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback


class Deadline(TrainerCallback):
    """Sets ``trainer.coa_deadline`` (perf-counter seconds) when training begins: dynamic sampling
    starts no refill round after it."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.trainer: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer is not None:
            self.trainer.coa_deadline = time.perf_counter() + self.budget_s


class EntropyGuard(TrainerCallback):
    """Stops training when the mean token entropy of the last ``window`` logged steps falls below
    ``floor`` (a ``TrainerCallback``).

    One generation batch's entropy is noisy: a confident SFT model on its best family logged
    0.005-0.058 nats within 30 steps (demo math, 2026-11-24), so a single step under the floor is no
    collapse; a window of them is.
    """

    def __init__(self, floor: float | None, grace_steps: int, window: int = 1) -> None:
        self.floor, self.grace_steps, self.window = floor, grace_steps, max(1, window)
        self.recent: list[float] = []
        self.tripped: str | None = None

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        entropy = (logs or {}).get("entropy")
        if self.floor is None or entropy is None:
            return
        self.recent = (self.recent + [float(entropy)])[-self.window :]
        if state.global_step <= self.grace_steps:
            return
        mean = sum(self.recent) / len(self.recent)
        if mean < self.floor:
            zero = (logs or {}).get("dynamic/zero_variance_share")
            share = f", {zero:.0%} of groups with equal rewards" if zero is not None else ""
            over = f" (mean of the last {len(self.recent)} logged steps)" if len(self.recent) > 1 else ""
            self.tripped = (
                f"entropy collapse: mean token entropy {mean:.4f} nats{over} fell below the floor "
                f"{self.floor} at step {state.global_step}{share}; the run stopped instead of spending its "
                "budget (lower the learning rate, raise the temperature or the floor's grace, or set "
                "entropy_floor: null)"
            )
            control.should_training_stop = True
