"""coa.evaluate: run a CoA model on tasks with real tools, and score it.

* :mod:`~coa.evaluate.config`: :class:`EvalConfig` (limits, backend, samples, prompt style);
* :mod:`~coa.evaluate.generation`: :func:`open_policy`: HF ``generate`` in process or an
  OpenAI-compatible completions server (vLLM), as :mod:`coa.rollout` policies;
* :mod:`~coa.evaluate.inference`: the tasks' prompts and episodes, run by the rollout engine
  (generate until a tool tag closes, run the tool, append the observation, stop on ``answer`` or a
  limit; a forged observation is a format error);
* :mod:`~coa.evaluate.metrics`: format-valid rate, accuracy, tokens and tool calls per task, the
  scorer of each benchmark, how each figure is computed, and coverage of each task set;
* :mod:`~coa.evaluate.stage`: :func:`evaluate_tasks` → ``eval.v1``, each answer scored by its
  benchmark's scorer (:mod:`coa.scoring.benchmarks`);
* :mod:`~coa.evaluate.replay`: which tool observations a run saw (live, or a recording replayed);
* :mod:`~coa.evaluate.predictions`: prediction files made elsewhere scored the same way
  (``coa score``, ``coa evaluate --predictions``);
* :mod:`~coa.evaluate.step`: the evaluation step (→ ``eval`` artifact; also from prediction
  files) and the training-report step;
* :mod:`~coa.evaluate.training_report`: the training report (before/after SFT beside the teacher).
* :mod:`~coa.evaluate.changes`: what each training step changed, paired on the same tasks, with its
  interval (the report's section, ``coa run``'s last table).

This package imports nothing: a step's key hashes the files its build can reach (its import
closure), and a package that re-exported its modules would put all of them in the closure of every
step that reaches one (the gate compares evaluations with :mod:`coa.evaluate.compare`). Import the
module that holds a name (``from coa.evaluate.config import EvalConfig``).
"""
