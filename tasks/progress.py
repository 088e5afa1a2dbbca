"""A step's live progress in the Prefect UI: a progress artifact and a small live table.

:class:`StepProgress` is the ``progress`` a step's build reports to (``progress(done, planned)``:
runs collected, optimizer steps, tasks evaluated) and, through :class:`~coa.steps.LiveMetrics`, its
live figures (loss or reward, tokens/s). It keeps, keyed per flow, profile and step:

* ``<scope>-<step>-progress``: Prefect's progress artifact, created at 0% when the step starts,
  moved as the work advances (at most every :data:`PROGRESS_EVERY_S`, and at the end), its
  description ``12 of 40 planned (30%), loss 2.31, 1,204 tokens/s, 0:12 elapsed, ~0:28 left``; 100%
  when the step is built or reused;
* ``<scope>-<step>-live``: a table of the last :data:`TABLE_ROWS` snapshots (done, planned, the live
  figures, elapsed, ETA), written once the step has run :data:`TABLE_EVERY_S`, then at most that
  often (each write is a new version of the keyed artifact), and at the end of a step that wrote one;
* the log line at each tenth of the work (:func:`tasks.run_step.time_left`'s pace).

Publishing never fails the step: an API error is logged once as a warning and the step goes on. The
artifacts are written synchronously (``_sync=True``) also when the build reports from inside its
event loop (collection, evaluation), where Prefect's functions would otherwise return a coroutine.
A dispatched step runs the same task (:mod:`flows.step`), so its progress shows in its own flow run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from coa.progress import figures_text
from tasks.publish import artifact_key

PROGRESS_EVERY_S = 1.0
"""The fewest seconds between two moves of the progress artifact (one small PATCH each)."""
TABLE_EVERY_S = 30.0
"""The fewest seconds between two versions of the live table (each is a row of the artifacts list): a
step shorter than this writes none, a 2-hour SFT about 240."""
TABLE_ROWS = 10
"""Snapshots the live table keeps (the newest last)."""


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StepProgress:
    """The live progress of one step run (see the module)."""

    def __init__(
        self,
        name: str,
        scope: str,
        logger: Any,
        log_line: Callable[[int, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        every_s: float | None = None,
        table_every_s: float | None = None,
    ) -> None:
        self.name, self.logger, self.clock = name, logger, clock
        self.key = artifact_key(scope, name, "progress")
        self.table_key = artifact_key(scope, name, "live")
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.table_every_s = TABLE_EVERY_S if table_every_s is None else table_every_s
        self.log_line = log_line
        self.started = clock()
        self.first: tuple[int, float] | None = None  # (done, when) at the first report: the pace's origin
        self.done, self.total = 0, 0
        self.figures: dict[str, float] = {}
        self.rows: list[dict[str, Any]] = []
        self._id: Any = None
        self._moved_at = float("-inf")
        self._table_at = self.started  # the first table after table_every_s: none for a short step
        self._failed = False

    # -- the build's side -------------------------------------------------------------------

    def start(self) -> StepProgress:
        """The progress artifact at 0% (the step has started, nothing is done yet)."""
        self._id = self._safely(
            lambda: create_progress_artifact(  # _sync: a build's loop may be running in this thread
                0.0,
                key=self.key,
                description=f"`{self.name}`: started",
                _sync=True,  # type: ignore[call-arg]
            )
        )
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.log_line is not None:
            self.log_line(done, total)
        now = self.clock()
        if self.first is None:
            self.first = (done, now)
        self.done, self.total = done, total
        end = total > 0 and done >= total
        if end or now - self._moved_at >= self.every_s:
            self._moved_at = now
            self._move(100.0 * done / total if total else 0.0, self.describe(now))
        if (end and self.rows) or now - self._table_at >= self.table_every_s:
            self._table_at = now
            self._table(now)

    def metrics(self, values: Mapping[str, float]) -> None:
        """The build's live figures (loss, reward, tokens_per_s): shown in the next table row."""
        self.figures.update(values)

    # -- the end -----------------------------------------------------------------------------

    def finish(self, reused: bool) -> None:
        """100%: built (the last report's counts) or reused (nothing ran)."""
        now = self.clock()
        if reused:
            self._move(100.0, f"`{self.name}`: reused (a committed artifact, nothing ran)")
            return
        if self.total and self.rows and self.rows[-1]["done"] != self.total:
            self.done = max(self.done, self.total)
            self._table(now)
        self._move(100.0, self.describe(now, "built: "))

    def failed(self, reason: str) -> None:
        self._move(self.percent, f"`{self.name}`: failed at {self.done} of {self.total} planned: {reason}")

    # -- what the UI shows -------------------------------------------------------------------

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 0.0

    def eta(self, now: float) -> float | None:
        """Seconds left at the pace since the first report; None without a pace."""
        if self.first is None:
            return None
        ran, seconds = self.done - self.first[0], now - self.first[1]
        if ran <= 0 or seconds <= 0 or self.done >= self.total:
            return None
        return seconds / ran * (self.total - self.done)

    def describe(self, now: float, lead: str = "") -> str:
        left = self.eta(now)
        pace = f", ~{clock_text(left)} left" if left is not None else ""
        figures = figures_text(self.figures)
        figures = f", {figures}" if figures else ""
        return (
            f"`{self.name}`: {lead}{self.done} of {self.total} planned ({self.percent:.0f}%){figures}, "
            f"{clock_text(now - self.started)} elapsed{pace}"
        )

    def _move(self, percent: float, description: str) -> None:
        if self._id is None:
            return
        self._safely(lambda: update_progress_artifact(self._id, min(100.0, percent), description=description))

    def _table(self, now: float) -> None:
        left = self.eta(now)
        row: dict[str, Any] = {"done": self.done, "planned": self.total}
        row |= {k: round(v, 4) for k, v in sorted(self.figures.items())}
        row |= {
            "elapsed": clock_text(now - self.started),
            "eta": clock_text(left) if left is not None else "",
        }
        self.rows = [*self.rows, row][-TABLE_ROWS:]
        columns = list(dict.fromkeys(k for r in self.rows for k in r))  # in the order they first came
        table = [{c: r.get(c, "") for c in columns} for r in self.rows]
        self._safely(
            lambda: create_table_artifact(
                table,  # type: ignore[call-arg]
                key=self.table_key,
                description=f"`{self.name}`: live figures, newest last",
                _sync=True,
            )
        )

    def _safely(self, call: Callable[[], Any]) -> Any:
        if self._failed:
            return None
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - the UI's progress must never fail the step
            self._failed = True
            self.logger.warning("%s: live progress not published (%s); the step goes on", self.name, e)
            return None
