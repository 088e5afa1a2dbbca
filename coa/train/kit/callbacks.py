"""Trainer callbacks every recipe uses: the step counter of the steps-run guard, one log line per
logging step, the last step logged, progress reports.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from typing import Any

from transformers import TrainerCallback


class StepCounter(TrainerCallback):
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


class LogLastStep(TrainerCallback):
    """Log the final step too, so the curves end where training ended."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= state.max_steps:
            control.should_log = True


class LogToLogger(TrainerCallback):
    """Training logs as one line each on ``logger`` (the progress bars are off): ``label``, the
    step of the plan, the logged values (only ``keys`` when given), floats to ``digits`` places."""

    def __init__(
        self, logger: str, label: str = "step", keys: Collection[str] | None = None, digits: int = 5
    ) -> None:
        self.log = logging.getLogger(logger)
        self.label, self.keys, self.digits = label, keys, digits

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs and state.is_world_process_zero:
            shown = {
                k: round(v, self.digits) if isinstance(v, float) else v
                for k, v in logs.items()
                if self.keys is None or k in self.keys
            }
            line = json.dumps(shown, sort_keys=True)
            self.log.info("%s %d/%d %s", self.label, state.global_step, state.max_steps, line)


def progress_callback(report: Callable[[int, int], None]) -> TrainerCallback:
    """A callback that reports ``(optimizer step, planned steps)`` after every step (the Prefect
    layer logs it in tenths; the CLI draws a bar)."""

    class _Progress(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                report(int(state.global_step), int(state.max_steps))

    return _Progress()
