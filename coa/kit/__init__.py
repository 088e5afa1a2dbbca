"""coa.kit: the one trainer kit the recipes (SFT in :mod:`coa.train.sft`, GRPO in
:mod:`coa.rl.grpo`) are written over, as TRL keeps its trainers side by side over one base. The
trainers stand on it side by side: RL imports no module of SFT's package, and the kit imports
neither (the ``trainers-side-by-side`` import contract).

* :mod:`~coa.kit.recipe`: :class:`Recipe` (a trainer's names, files and errors) and
  :class:`TrainError`;
* :mod:`~coa.kit.config`: the config fields every recipe shares (:class:`TrainLoop`,
  :class:`TrainRun`, :class:`TrainStage`, :class:`LoraSettings`), declared once;
* :mod:`~coa.kit.run`: output folder, checkpoints and resume checks, the plan file, the loop,
  the steps-run guard, atomic result files;
* :mod:`~coa.kit.lora`: the ``peft`` config of the LoRA settings (:class:`~coa.kit.config.LoraSettings`);
* :mod:`~coa.kit.budget`: a time budget re-planned while training (:class:`TimeBudget`,
  :class:`StepPlan`; imports transformers);
* :mod:`~coa.kit.checkpoints`: checkpoints written atomically, rotated over complete ones, what a
  rerun resumes from (read from disk);
* :mod:`~coa.kit.callbacks`: step counter, log lines, last-step log, progress (imports
  transformers);
* :mod:`~coa.kit.launch`: in process or ``accelerate launch`` / ``torchrun`` (one implementation);
* :mod:`~coa.kit.ranks`: the world of a launched run, the global batch split over its ranks;
* :mod:`~coa.kit.fsdp`: FSDP2 on CPU ranks, where accelerate's FSDP does not take (the recipe
  shards, saves gathered, generates on unsharded groups);
* :mod:`~coa.kit.entry`: the ``python -m <recipe> --config resolved.yaml`` command line;
* :mod:`~coa.kit.tracking`: ``report_to`` and the run name, in one place.

This package imports no recipe: the recipes import it. Importing it is light (no torch).
"""

from coa.kit.config import RESUME_FREE_FIELDS, TrainLoop, TrainRun, TrainStage
from coa.kit.recipe import Recipe, TrainError

__all__ = ["RESUME_FREE_FIELDS", "Recipe", "TrainError", "TrainLoop", "TrainRun", "TrainStage"]
