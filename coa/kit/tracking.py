"""Where a run's metrics go: the ``report_to`` list and run name every recipe hands its trainer.

One place for both, SFT and RL. The tracker comes from the active ``tracking:`` config
(:mod:`coa.tracking`): ``none`` (the default) reports nothing; otherwise the trainer's own
integration (MLflow, TensorBoard, W&B, Trackio) reports to the run :func:`coa.tracking.step_run`
opened for the step (its environment points the integration there). The run name is the run's
output folder, which for a pipeline step is ``<artifact name>-<content key>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from coa import tracking
from coa.kit.recipe import Recipe


def report_to(config: Any) -> list[str] | str:
    """The ``report_to`` of ``TrainingArguments``: the active tracker, or ``"none"``."""
    active = tracking.current()
    tracking.require(active.backend)
    return tracking.report_to(active)


def run_name(recipe: Recipe, out: Path) -> str:
    """A tracker run's name: the one the step's tracker run was opened with (``<step>/<artifact folder>``),
    else the recipe and the output folder's name (the step and its content key)."""
    return os.environ.get(tracking.RUN_ENV) or f"{recipe.name}/{Path(out).name}"


def tracking_args(recipe: Recipe, config: Any, out: Path) -> dict[str, Any]:
    """The tracking keyword arguments of a recipe's ``TrainingArguments`` (``SFTConfig``, ``GRPOConfig``)."""
    args: dict[str, Any] = {"report_to": report_to(config), "run_name": run_name(recipe, out)}
    if tracking.current().backend == "trackio":
        # the project of the step's run; never a Hugging Face Space snapshot when a model is pushed
        args.update(project=tracking.current().experiment, trackio_static_space_id=False)
    return args
