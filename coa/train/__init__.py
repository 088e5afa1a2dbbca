"""coa.train: fine-tuning the student, and the trainer kit SFT and RL share.

* :mod:`~coa.train.kit`: the one trainer kit (recipe, shared config fields, checkpoints and resume
  checks, steps-run guard, callbacks, ``accelerate launch``, the command line, the tracking hook);
  the RL recipe (:mod:`coa.rl.grpo`) is written over it as SFT's is;
* :mod:`~coa.train.config`: :class:`SFTRunConfig`, :class:`SFTResult`, the errors and the ``SFT``
  recipe (light to import);
* :mod:`~coa.train.data`: ``sft.v1`` rows → ``input_ids`` + loss ``labels`` via :mod:`coa.format`;
* :mod:`~coa.train.sft_trainer` / :mod:`~coa.train.sft_plan` / :mod:`~coa.train.curves`: the
  ``SFTTrainer`` of a run, its plan (steps or a time budget, :mod:`~coa.train.budget`), its curves;
* :mod:`~coa.train.sft`: :func:`~coa.train.sft.run_sft` and the ``python -m coa.train.sft --config
  resolved.yaml`` entry point (imports torch and TRL);
* :mod:`~coa.train.step`: the pipeline step (a model + ``sft`` examples → a ``model`` artifact).
"""

from coa.train.config import LoraSettings, SFTError, SFTResult, SFTRunConfig, StepCountError

__all__ = ["LoraSettings", "SFTError", "SFTResult", "SFTRunConfig", "StepCountError"]
