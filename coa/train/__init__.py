"""coa.train: fine-tuning the student (SFT), a recipe over the trainer kit (:mod:`coa.kit`), which
the RL recipe (:mod:`coa.rl.grpo`) stands on beside it.

* :mod:`~coa.train.config`: :class:`SFTRunConfig`, :class:`SFTResult`, the errors and the ``SFT``
  recipe (light to import);
* :mod:`~coa.train.data`: ``sft.v1`` rows → ``input_ids`` + loss ``labels`` via :mod:`coa.format`;
* :mod:`~coa.train.sft_trainer` / :mod:`~coa.train.sft_plan` / :mod:`~coa.train.curves`: the
  ``SFTTrainer`` of a run, its plan (steps or a time budget, :mod:`~coa.kit.budget`), its curves;
* :mod:`~coa.train.sft`: :func:`~coa.train.sft.run_sft` and the ``python -m coa.train.sft --config
  resolved.yaml`` entry point (imports torch and TRL);
* :mod:`~coa.train.step`: the pipeline step (a model + ``sft`` examples → a ``model`` artifact).
"""

from coa.train.config import SFTError, SFTResult, SFTRunConfig, StepCountError

__all__ = ["SFTError", "SFTResult", "SFTRunConfig", "StepCountError"]
