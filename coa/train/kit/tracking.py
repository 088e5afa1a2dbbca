"""Where a run's metrics go: the ``report_to`` list and run name every recipe hands its trainer.

One place for both, so experiment tracking (MLflow, TensorBoard, W&B, Trackio through the
trainers' own ``report_to`` integrations) is added here once for SFT and RL. Today nothing is
reported (``"none"``: the curves live in the artifacts); the run name is already the run's output
folder, which for a pipeline step is ``<artifact name>-<content key>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coa.train.kit.recipe import Recipe


def report_to(config: Any) -> list[str] | str:
    """The ``report_to`` of ``TrainingArguments`` for ``config``: ``"none"`` (no tracker)."""
    return "none"


def run_name(recipe: Recipe, out: Path) -> str:
    """A tracker run's name: the recipe and the output folder's name (the step and its content key)."""
    return f"{recipe.name}/{Path(out).name}"


def tracking_args(recipe: Recipe, config: Any, out: Path) -> dict[str, Any]:
    """The tracking keyword arguments of a recipe's ``TrainingArguments`` (``SFTConfig``, ``GRPOConfig``)."""
    return {"report_to": report_to(config), "run_name": run_name(recipe, out)}
