"""coa.rl: agentic RL (GRPO with DAPO's defaults) on multi-turn CoA tool rollouts.

* :mod:`~coa.rl.config`: :class:`RLStageConfig` (the one RL config; a run's :class:`RLRunConfig` is
  derived from it), :class:`RLResult`, the errors;
* :mod:`~coa.rl.rewards`: the reward terms per family (correct, format, efficiency, overlong);
* :mod:`~coa.rl.judge_audit`: the audit of the LLM judge of web answers against a labelled set, before a run;
* :mod:`~coa.rl.rollouts`: a generation batch from the rollout engine, with dynamic sampling;
* :mod:`~coa.rl.rollout_hook`: TRL's rollout hook over it (backends, weight push, async), the rows on disk;
* :mod:`~coa.rl.callbacks` / :mod:`~coa.rl.curves`: entropy guard, refill deadline; the logged curves;
* :mod:`~coa.rl.grpo`: TRL's ``GRPOTrainer`` driven by those rollouts (``run_rl``, ``python -m``), a
  recipe of the trainer kit (:mod:`coa.kit`) beside SFT's;
* :mod:`~coa.rl.step`: the pipeline step (SFT model + rl_prompts → ``model`` artifact + ``rollouts``).
"""
