"""coa.train: fine-tuning the student.

* :mod:`~coa.train.config`: :class:`SFTRunConfig`, :class:`SFTResult` and the errors (light to import);
* :mod:`~coa.train.data`: ``sft.v1`` rows → ``input_ids`` + loss ``labels`` via :mod:`coa.format`;
* :mod:`~coa.train.sft`: :func:`~coa.train.sft.run_sft` (TRL ``SFTTrainer``) and the
  ``python -m coa.train.sft --config resolved.yaml`` entry point (imports torch and TRL).
"""

from coa.train.config import LoraSettings, SFTError, SFTResult, SFTRunConfig, StepCountError

__all__ = ["LoraSettings", "SFTError", "SFTResult", "SFTRunConfig", "StepCountError"]
