"""coa.train.kit: the one trainer kit the recipes (SFT in :mod:`coa.train.sft`, GRPO in
:mod:`coa.rl.grpo`) are written over, as TRL keeps its trainers side by side over one base.

* :mod:`~coa.train.kit.recipe`: :class:`Recipe` (a trainer's names, files and errors) and
  :class:`TrainError`;
* :mod:`~coa.train.kit.config`: the config fields every recipe shares (:class:`TrainLoop`,
  :class:`TrainRun`, :class:`TrainStage`), declared once;
* :mod:`~coa.train.kit.run`: output folder, checkpoints and resume checks, the plan file, the loop,
  the steps-run guard, atomic result files;
* :mod:`~coa.train.kit.checkpoints`: checkpoints written atomically, rotated over complete ones, what a
  rerun resumes from (read from disk);
* :mod:`~coa.train.kit.callbacks`: step counter, log lines, last-step log, progress (imports
  transformers);
* :mod:`~coa.train.kit.launch`: in process or ``accelerate launch`` / ``torchrun`` (one implementation);
* :mod:`~coa.train.kit.ranks`: the world of a launched run, the global batch split over its ranks;
* :mod:`~coa.train.kit.fsdp`: FSDP2 on CPU ranks, where accelerate's FSDP does not take (the recipe
  shards, saves gathered, generates on unsharded groups);
* :mod:`~coa.train.kit.entry`: the ``python -m <recipe> --config resolved.yaml`` command line;
* :mod:`~coa.train.kit.tracking`: ``report_to`` and the run name, in one place.

This package imports no recipe: the recipes import it. Importing it is light (no torch).
"""

from coa.train.kit.config import RESUME_FREE_FIELDS, TrainLoop, TrainRun, TrainStage
from coa.train.kit.recipe import Recipe, TrainError

__all__ = ["RESUME_FREE_FIELDS", "Recipe", "TrainError", "TrainLoop", "TrainRun", "TrainStage"]
