"""Checkpoints written atomically, rotated over complete ones only, and named from disk.

The trainer writes a checkpoint in several files (weights, optimizer, scheduler, RNG, trainer state);
a process killed in between leaves a folder that looks like a checkpoint but is not one. Here
(:func:`install`, on every recipe's trainer through :func:`coa.kit.run.train`) each checkpoint
is written under a staging folder first (``checkpoints/.staging/checkpoint-N``, which no reader
globs), then renamed to ``checkpoints/checkpoint-N`` once every file is there: a checkpoint folder
either is complete or does not exist. Rotation (``save_total_limit``) then counts complete
checkpoints only, by step, and never removes the newest one; a leftover staging folder or a damaged
``checkpoint-N`` (no readable trainer state, e.g. written before this module) is removed and never
read. :func:`complete_checkpoints` and :func:`describe_resume` tell what a rerun resumes from, read
from disk.
"""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path
from typing import Any

STAGING_DIR = ".staging"
PREFIX = "checkpoint"
TRAINER_STATE = "trainer_state.json"


def checkpoint_step(path: Path) -> int:
    """The N of a ``checkpoint-N`` folder (-1 when the name has none)."""
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def is_complete(path: Path) -> bool:
    """A checkpoint folder whose trainer state (written last) is there and parses."""
    state = path / TRAINER_STATE
    if not path.is_dir() or not state.is_file():
        return False
    try:
        json.loads(state.read_text())
    except (OSError, ValueError):
        return False
    return True


def complete_checkpoints(folder: str | Path) -> list[Path]:
    """The complete ``checkpoint-N`` folders under ``folder``, oldest step first."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found = [p for p in root.glob(f"{PREFIX}-*") if checkpoint_step(p) >= 0 and is_complete(p)]
    return sorted(found, key=checkpoint_step)


def last_complete(folder: str | Path) -> Path | None:
    """The highest-step complete checkpoint under ``folder``, or None."""
    done = complete_checkpoints(folder)
    return done[-1] if done else None


def describe_resume(folder: str | Path) -> str:
    """What a rerun training into ``folder`` starts from, read from disk: ``resumes from checkpoint N
    (path)`` or ``starts from step 0 (no complete checkpoint in path)``."""
    last = last_complete(folder)
    if last is not None:
        return f"resumes from checkpoint {checkpoint_step(last)} ({last})"
    return f"starts from step 0 (no complete checkpoint in {folder})"


def clean(folder: str | Path) -> None:
    """Remove what a killed save left: the staging folder and ``checkpoint-N`` folders that are not
    complete (never read, and never counted by rotation)."""
    root = Path(folder)
    shutil.rmtree(root / STAGING_DIR, ignore_errors=True)
    if root.is_dir():
        for path in root.glob(f"{PREFIX}-*"):
            if path.is_dir() and not is_complete(path):
                shutil.rmtree(path, ignore_errors=True)


def rotate(folder: str | Path, keep: int | None) -> None:
    """Keep the ``keep`` newest complete checkpoints (None or < 1: all); the newest always stays."""
    if keep is None or keep < 1:
        return
    done = complete_checkpoints(folder)
    for path in done[: max(0, len(done) - max(keep, 1))]:
        shutil.rmtree(path, ignore_errors=True)


def install(trainer: Any) -> None:
    """Make ``trainer`` (a ``transformers.Trainer``) write its checkpoints atomically and rotate over
    complete ones only (see the module doc). Idempotent."""
    if getattr(trainer, "_coa_atomic_checkpoints", False):
        return
    original = trainer._save_checkpoint

    def save(self: Any, model: Any, trial: Any = None) -> None:
        run_dir = Path(self.args.output_dir)
        staging = run_dir / STAGING_DIR
        name = f"{PREFIX}-{self.state.global_step}"
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        keep_limit = self.args.save_total_limit
        self.args.output_dir = str(staging)
        self.args.save_total_limit = None  # rotation is ours, over complete checkpoints only
        try:
            original(model, trial)
        finally:
            self.args.output_dir = str(run_dir)
            self.args.save_total_limit = keep_limit
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            target = run_dir / name
            if target.exists():  # an incomplete leftover of a killed save at this step
                shutil.rmtree(target)
            os.replace(staging / name, target)
            shutil.rmtree(staging, ignore_errors=True)
            if self.state.best_model_checkpoint:
                best = Path(self.state.best_model_checkpoint)
                if best.parent == staging:
                    self.state.best_model_checkpoint = str(run_dir / best.name)
            rotate(run_dir, keep_limit)
        self.accelerator.wait_for_everyone()

    trainer._save_checkpoint = types.MethodType(save, trainer)
    trainer._coa_atomic_checkpoints = True
