"""The one Prefect task that runs a step, and where project errors become Prefect states.

A :class:`~coa.errors.CoaError` (bad input, a failed check, missing infrastructure) ends the task
run as ``Failed`` with one line (``check failed: curation gate failed (…); see the report …``), no
traceback; anything else is a bug and keeps Prefect's traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from coa import io
from coa.errors import CoaError, describe
from coa.execution import ShardExecutor
from coa.plan.stages import facts
from coa.steps import Step, StepResult, run_step
from coa.view.commit import commit_page
from tasks.progress import StepProgress
from tasks.publish import publish


def _progress(logger: Any, name: str, clock: Callable[[], float] = time.monotonic) -> Any:
    """A step's progress callback: a log line at each tenth of the work and at the end, with the time
    left at the pace since the first report (``sft: 2500/5000, ~7:40 left``)."""
    last_tenth, first_done, first_at = -1, 0, 0.0

    def report(done: int, total: int) -> None:
        nonlocal last_tenth, first_done, first_at
        now = clock()
        if last_tenth == -1:
            first_done, first_at = done, now
        tenth = done * 10 // max(1, total)
        if done == total or tenth != last_tenth:
            last_tenth = tenth
            left = time_left(done - first_done, now - first_at, total - done)
            logger.info("%s: %d/%d%s", name, done, total, f", ~{left} left" if left else "")

    return report


def time_left(done: int, seconds: float, remaining: int) -> str | None:
    """``remaining`` units at the pace of ``done`` in ``seconds``, as ``m:ss``; None without a pace."""
    if done <= 0 or remaining <= 0 or seconds <= 0:
        return None
    minutes, secs = divmod(round(seconds / done * remaining), 60)
    return f"{minutes}:{secs:02d}"


@task(name="step", task_run_name="{step.name}", cache_policy=NO_CACHE, log_prints=False)
def run_step_task(
    step: Step,
    done: dict[str, StepResult],
    run_it: bool = True,
    executor: ShardExecutor | None = None,
    scope: str = "",
) -> Any:
    """Run (or reuse) ``step``, its live progress in the UI (:mod:`tasks.progress`); publish its Prefect
    artifacts; a project error becomes ``Failed``.

    ``done``: the results of the steps it reads (only those: Prefect draws an edge from each);
    ``executor``: where the step's shards run (:mod:`tasks.fanout`; None = in this process);
    ``scope``: the prefix of its artifact keys (:func:`tasks.publish.scope_of`)."""
    logger = get_run_logger()
    progress = StepProgress(step.name, scope, logger, _progress(logger, step.name)).start()
    try:
        result = run_step(
            step, io.Store(), done, progress, reuse_only=not run_it, executor=executor, finish=commit_page
        )
    except CoaError as e:
        logger.error("%s: %s", step.name, describe(e))
        progress.failed(describe(e))
        return Failed(message=describe(e))
    progress.finish(result.reused)
    logger.info("%s: %s %s", step.name, "reused" if result.reused else "built", result.ref.uri)
    for message in facts(step.stage, result).warnings:  # e.g. RL's reward-hacking alarm
        logger.warning("%s: %s", step.name, message)
    publish(step, result, scope)
    return result
