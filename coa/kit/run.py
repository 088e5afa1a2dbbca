"""The life of a training run, shared by every recipe: output folder, checkpoints and resume, the
plan file, the loop, the steps-run guard, atomic result files.

A run's output folder holds ``checkpoints/checkpoint-N`` (written by the trainer every
``save_steps`` and at the end, atomically: :mod:`coa.kit.checkpoints`), the recipe's plan
file and, once finished, ``model/`` and its result file (:func:`finish`).

* :func:`open_run` before the trainer is built: a fresh run refuses a folder that already holds
  checkpoints (two runs would mix); a resumed run continues from the last *complete* checkpoint
  (its trainer state, written last, exists) and refuses a config that changes the training itself
  (:func:`check_resumable`; the recipe names the fields that may change).
* :func:`train` runs the loop from that checkpoint; when the checkpoint is already the plan's final
  step (a run killed while writing its model) it loads it and trains no more
  (``Trainer.train`` would take one extra step there).
* :func:`check_steps` is the steps-run guard: a run that ends with another number of optimizer
  steps than planned (a callback or a signal stopped it, a trainer quirk added one) raises the
  recipe's step-count error instead of reporting success, and no final model is written.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from coa.kit import checkpoints, fsdp
from coa.kit.recipe import Recipe

CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
TRAINER_STATE = "trainer_state.json"

R = TypeVar("R", bound=BaseModel)


@dataclasses.dataclass(frozen=True)
class RunStart:
    """Where a run starts: its folder, the checkpoint it resumes from and that checkpoint's plan."""

    out: Path
    last: Path | None
    """The last complete checkpoint when resuming; None for a fresh start."""
    plan: dict[str, Any] | None
    """The saved plan when resuming from a checkpoint (it holds the config it was made for)."""

    @property
    def checkpoints(self) -> Path:
        return self.out / CHECKPOINTS_DIR

    @property
    def start_step(self) -> int:
        return checkpoint_step(self.last) if self.last is not None else 0


def open_run(recipe: Recipe, config: Any, output_dir: str | Path | None, resume: bool) -> RunStart:
    """Check that ``config`` may start (or resume) in its output folder; see the module doc."""
    chosen = output_dir if output_dir is not None else config.output_dir
    if chosen is None:
        raise recipe.error("no output folder: pass output_dir or set output_dir in the config")
    out = Path(chosen)
    last = last_checkpoint(out / CHECKPOINTS_DIR)
    if last is None:
        return RunStart(out, None, None)
    if not resume:
        raise recipe.error(
            f"{out / CHECKPOINTS_DIR} already holds checkpoints (last: {last.name}); pass resume=True to "
            "continue that run or use an empty output folder"
        )
    fsdp.check_no_resume(last, recipe.name, recipe.error)
    path = out / recipe.plan_file
    if not path.is_file():
        raise recipe.error(f"{path} is missing: cannot tell what plan {last} belongs to")
    plan = dict(json.loads(path.read_text()))
    check_resumable(recipe, plan["config"], config)
    return RunStart(out, last, plan)


def check_resumable(recipe: Recipe, saved: dict[str, Any], config: Any) -> None:
    """Raise when ``config`` differs from the ``saved`` one in a field that changes the training."""
    now = config.model_dump(mode="json")
    changed = sorted(
        k for k in set(saved) | set(now) if k not in recipe.resume_free and saved.get(k) != now.get(k)
    )
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed)
        raise recipe.error(f"cannot resume with a changed training config ({diffs}); use a new output folder")


def write_plan(recipe: Recipe, trainer: Any, start: RunStart, plan: dict[str, Any], config: Any) -> None:
    """Write the plan of a fresh run (rank 0); a resumed run keeps the plan of its checkpoint."""
    if start.last is None and trainer.is_world_process_zero():
        start.out.mkdir(parents=True, exist_ok=True)
        write_json(start.out / recipe.plan_file, {**plan, "config": config.model_dump(mode="json")})


def train(recipe: Recipe, trainer: Any, start: RunStart, planned: int) -> float:
    """Run the loop from ``start`` (see the module doc); the wall time of the loop in seconds."""
    t0 = time.perf_counter()
    if trainer.is_world_process_zero():  # what a killed save left is never read nor rotated
        checkpoints.clean(start.checkpoints)
    checkpoints.install(trainer)
    if trainer.is_world_process_zero():  # a launching process relays it (coa.kit.launch)
        from coa.kit.callbacks import PROGRESS_FILE, ProgressFile, progress_callback

        trainer.add_callback(progress_callback(ProgressFile(start.out / PROGRESS_FILE)))
    if start.last is not None and start.start_step >= planned:
        load_finished(recipe, trainer, start.last)
        # the callbacks see the loop start where it ends (step counter, held-out scores, budget)
        trainer.callback_handler.on_train_begin(trainer.args, trainer.state, trainer.control)
    else:
        trainer.train(resume_from_checkpoint=str(start.last) if start.last is not None else None)
    return time.perf_counter() - t0


def check_steps(recipe: Recipe, steps_run: int, trainer: Any, planned: int, start: RunStart) -> None:
    """The steps-run guard: ``steps_run`` in this call and the global step must match the plan."""
    expected = planned - start.start_step
    global_step = int(trainer.state.global_step)
    if steps_run != expected or global_step != planned:
        raise recipe.step_count_error(
            f"{recipe.title} took {steps_run} optimizer steps in this run but the plan was {expected} "
            f"(global step {global_step} of {planned}, resumed from {start.start_step}); not reporting "
            f"success. The checkpoints in {start.checkpoints} are kept; no final model was written."
        )


def load_finished(recipe: Recipe, trainer: Any, checkpoint: Path) -> None:
    """Load the weights and trainer state of a checkpoint at the plan's final step."""
    from transformers import TrainerState

    if trainer.is_deepspeed_enabled:
        raise recipe.error(
            f"{checkpoint} is the final step of the plan; under DeepSpeed export its weights with "
            "zero_to_fp32.py instead of resuming"
        )
    trainer._load_from_checkpoint(str(checkpoint))
    trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE))


checkpoint_step = checkpoints.checkpoint_step


def last_checkpoint(ckpt_dir: str | Path) -> Path | None:
    """The highest-step complete checkpoint (its trainer state, written last, exists and parses), or
    None; see :mod:`coa.kit.checkpoints`."""
    return checkpoints.last_complete(ckpt_dir)


def finish(
    recipe: Recipe,
    trainer: Any,
    start: RunStart,
    measure: Callable[[Path], R],
    plot: Callable[[R], None],
    save: Callable[[Any, Path], None] | None = None,
) -> R:
    """The end of a run that passed the steps-run guard, the same for every recipe: the final model
    saved to ``model/`` (by ``save(trainer, model_dir)``, else the trainer's own ``save_model``), the
    recipe's result measured (``measure(model_dir)``), its curves plotted and, last, its result file
    written (rank 0, atomically: a result file means a finished run)."""
    model_dir = start.out / MODEL_DIR
    if save is not None:
        save(trainer, model_dir)
    else:
        trainer.save_model(str(model_dir))
    result = measure(model_dir)
    if trainer.is_world_process_zero():
        plot(result)
        write_json(start.out / recipe.result_file, result.model_dump(mode="json"))
    return result


def write_json(path: Path, value: Any) -> None:
    """Write JSON atomically (a temporary file renamed over the target): never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))
    tmp.replace(path)
