"""coa.sample: the student's own attempts at the training tasks, for the next SFT round.

* :mod:`~coa.sample.config`: :class:`SampleConfig` (k samples per task, temperature, limits);
* :mod:`~coa.sample.core`: :func:`sample_tasks`: episodes from the rollout engine, scored and
  format-checked like an evaluation, as ``rollout.v1`` rows;
* :mod:`~coa.sample.step`: the ``sample`` step (a model and a task table → a ``rollouts`` table).

Curation keeps the verified-correct rows beside the teacher's runs (:mod:`coa.curate.rollouts`):
rejection-sampled self-improvement (STaR, RFT, expert iteration) built from the pipeline's steps.
"""

from coa.sample.config import SampleConfig

__all__ = ["SampleConfig"]
