"""The step task's progress lines (:mod:`tasks.run_step`): a line a tenth, with the time left."""

from __future__ import annotations

from typing import Any

from tasks.run_step import _progress, time_left


class _Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)


def test_progress_logs_each_tenth_with_the_time_left_at_the_pace_since_the_first_report() -> None:
    now = [100.0]
    logger = _Logger()
    report = _progress(logger, "sft", clock=lambda: now[0])
    report(1, 5000)  # set-up done; the pace is measured from here
    for done in range(2, 5001):
        now[0] += 0.2  # 300 steps a minute
        report(done, 5000)
    assert len(logger.lines) == 11
    assert logger.lines[0] == "sft: 1/5000"  # no pace yet
    assert logger.lines[5] == "sft: 2500/5000, ~8:20 left"  # 2,500 steps at 0.2 s
    assert logger.lines[-1] == "sft: 5000/5000"


def test_time_left() -> None:
    assert time_left(100, 60.0, 900) == "9:00"
    assert time_left(3, 1.0, 1) == "0:00"
    assert time_left(0, 0.0, 10) is None and time_left(10, 5.0, 0) is None
