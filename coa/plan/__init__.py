"""The plans: the one home of the modules that know every stage.

* :mod:`coa.plan.config`: the run's config (:class:`PipelineConfig`, one section per stage) and
  :func:`load_pipeline_config`;
* :mod:`coa.plan.choices`: the choices the plans share, written once (the task source, the model
  SFT starts from, RL after an evaluation, the student's tools);
* :mod:`coa.plan.pipeline`: the pipeline plan (``coa run``, the ``pipeline`` flow);
* :mod:`coa.plan.nightly`: the nightly plan (the ``nightly`` flow; its stages are :mod:`coa.nightly`,
  its ledger of nights :mod:`coa.registry.ledger`);
* :mod:`coa.plan.runner`: a plan as a typed object (its steps and named outputs) and the one loop
  that runs any plan, its step runner injected (the flows', ``infra/run_plan.py``'s);
* :mod:`coa.plan.run_result`: what a run of a plan did, typed (the ``pipeline`` flow's result);
* :mod:`coa.plan.stages`: the stage table (every :class:`~coa.steps.Stage`, by name), which every
  entry layer reads;
* :mod:`coa.plan.spec`: a step as a spec that another machine rebuilds from the stage table (the
  GPU pool's ``run-one-step`` flow), never re-plans.

The runner (:mod:`coa.steps`), the registry and the stages know no plan.

Loading a config (:mod:`coa.plan.config`) loads no stage's implementation: the plan itself
(:func:`plan`, which imports every stage's step) loads on first use (PEP 562).
"""

from typing import TYPE_CHECKING, Any

from coa.plan.config import DispatchConfig, PipelineConfig, PromotionConfig, load_pipeline_config

if TYPE_CHECKING:
    from coa.plan.pipeline import not_planned, plan

__all__ = [
    "DispatchConfig",
    "PipelineConfig",
    "PromotionConfig",
    "load_pipeline_config",
    "not_planned",
    "plan",
]


def __getattr__(name: str) -> Any:
    if name in ("not_planned", "plan"):
        from coa.plan import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
