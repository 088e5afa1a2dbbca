"""Trainer callbacks every recipe uses: the step counter of the steps-run guard, one log line per
logging step, the last step logged, progress reports.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
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


LIVE_FIGURES = ("loss", "reward", "learning_rate")
"""What a trainer's log line hands on to a :class:`~coa.steps.LiveMetrics` progress, beside tokens/s."""


def progress_callback(report: Callable[[int, int], None]) -> TrainerCallback:
    """A callback that reports ``(optimizer step, planned steps)`` after every step (the Prefect
    layer logs it in tenths and moves its progress artifact; the CLI draws a bar) and, when
    ``report`` takes live figures (:class:`~coa.steps.LiveMetrics`), each log line's loss (or
    reward) with the tokens per second since the run started."""
    from coa.progress import LiveMetrics

    live = report if isinstance(report, LiveMetrics) else None

    class _Progress(TrainerCallback):
        started: float | None = None
        tokens_before = 0  # a resumed run's tokens, seen before this process started

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.monotonic()
            self.tokens_before = int(getattr(state, "num_input_tokens_seen", 0) or 0)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                report(int(state.global_step), int(state.max_steps))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if live is None or not state.is_world_process_zero or not logs:
                return
            values = {k: float(logs[k]) for k in LIVE_FIGURES if isinstance(logs.get(k), int | float)}
            seen = int(getattr(state, "num_input_tokens_seen", 0) or 0) - self.tokens_before
            if seen > 0 and self.started is not None and time.monotonic() > self.started:
                values["tokens_per_s"] = seen / (time.monotonic() - self.started)
            if values:
                live.metrics(values)

    return _Progress()


PROGRESS_FILE = "progress.json"
"""In a launched run's output folder: rank 0's last ``{"done", "total", "figures"}``, rewritten at most
once a second (and at the last step), which the launching process relays (:class:`ProgressRelay`)."""


class ProgressFile:
    """A :class:`~coa.steps.LiveMetrics` progress that writes itself to ``path`` (atomically, at most
    every ``every_s`` and at the end): how a run launched in other processes reports its progress."""

    def __init__(self, path: Path, every_s: float = 1.0) -> None:
        self.path, self.every_s = path, every_s
        self.figures: dict[str, float] = {}
        self._written = float("-inf")

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._written < self.every_s:
            return
        self._written = now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps({"done": done, "total": total, "figures": self.figures}))
        tmp.replace(self.path)

    def metrics(self, values: Mapping[str, float]) -> None:
        self.figures.update(values)


class ProgressRelay:
    """The launching side of :class:`ProgressFile`: :meth:`poll` reads the file and hands what is new
    to ``report`` (and its figures, when ``report`` takes them)."""

    def __init__(self, path: Path, report: Callable[[int, int], None]) -> None:
        from coa.progress import LiveMetrics

        self.path, self.report = path, report
        self.live = report if isinstance(report, LiveMetrics) else None
        self.path.unlink(missing_ok=True)  # a file of an earlier launch is not this run's progress
        self._last: tuple[int, int] | None = None

    def poll(self) -> None:
        try:
            seen = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return  # not written yet (or being replaced): the next poll reads it
        done, total = int(seen["done"]), int(seen["total"])
        if (done, total) == self._last:
            return
        self._last = (done, total)
        if self.live is not None and seen.get("figures"):
            self.live.metrics(seen["figures"])
        self.report(done, total)
