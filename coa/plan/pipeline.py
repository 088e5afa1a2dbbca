"""The pipeline plan: the ordered list of steps of a ``coa run`` / ``pipeline`` flow run.

tasks (synthetic and/or imported) → collect → curate → convert → student → sft → evaluate the
student before and after SFT on the held-out tasks → with ``rounds: N``, N-1 self-improvement rounds
(sample → curate beside the teacher → convert → sft from the previous round → evaluate) → rl after
the last round (``rl.families: auto`` reads that round's evaluation) → evaluate after RL → the
teacher on the same tasks → the report.

A stage whose section is absent (``null``) has no step, and the data chain stops there;
:func:`not_planned` says why a stage has no step. The Prefect flow, ``coa run`` and ``coa run
--dry-run`` all use :func:`plan`.
"""

from __future__ import annotations

from collections.abc import Sequence

from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import step as curate
from coa.evaluate import step as evaluate
from coa.plan.choices import (
    Sources,
    collect_steps,
    evaluation,
    later_rounds,
    rl_after_evaluation,
    start_model,
    task_steps,
)
from coa.plan.config import PipelineConfig
from coa.plan.runner import Plan
from coa.steps import Step, StepInput
from coa.train import step as sft

NOT_BUILT: dict[str, str] = {}
"""Stages of the design that have no step yet, reported by the flow instead of being faked."""


def plan(config: PipelineConfig) -> Plan:
    """The steps of a pipeline run, in order, each wired to the steps it reads; the data chain stops
    at the first absent section of collect, curate, convert, student (training needs them all)."""
    sources = task_steps(config)
    steps = sources.steps
    if config.collect is None:
        return Plan(steps=tuple(steps))
    collected, raw = collect_steps(config.collect, sources.train, sources.encyclopedia)
    steps += collected
    if config.curate is None:
        return Plan(steps=tuple(steps))
    curated = curate.step(config.curate, raw, sources.train)
    steps.append(curated)
    if config.convert is None:
        return Plan(steps=tuple(steps), curated=curated)
    converted = convert.step(config.convert, curated.output("trajectories"), sources.train)
    steps.append(converted)
    if config.student is None:
        return Plan(steps=tuple(steps), curated=curated)
    trained, report = training_steps(config, sources, raw, converted)
    return Plan(steps=tuple(steps + trained), curated=curated, report=report)


def training_steps(
    config: PipelineConfig, sources: Sources, raw: StepInput, converted: Step
) -> tuple[list[Step], Step | None]:
    """student → sft → (evaluations before/after) → later rounds → rl → (evaluation after RL,
    teacher, report): the steps, and the report step (None when nothing is evaluated)."""
    assert config.student is not None and config.collect is not None
    data, prompts = converted.output("sft"), converted.output("rl_prompts")
    base, steps = start_model(config.student, data)
    tuned = sft.step(config.sft, base, data) if config.sft is not None else None
    steps += [tuned] if tuned is not None else []
    if config.evaluate is None or sources.heldout is None:  # no held-out benchmark: train only
        rounds = later_rounds(config, sources, tuned, raw, sources.train, evaluated=False)
        last = rounds[-1].model if rounds else tuned
        reinforce, _ = rl_after_evaluation(config, sources, prompts, last.output() if last else base, None)
        return steps + [s for r in rounds for s in r.steps] + reinforce, None
    before = evaluation(config, sources, base, "evaluate.before")
    after = evaluation(config, sources, tuned.output(), "evaluate.after") if tuned is not None else None
    rounds = later_rounds(config, sources, tuned, raw, sources.train, evaluated=True)
    steps += [before, *([after] if after else []), *(s for r in rounds for s in r.steps)]
    last, judged = (rounds[-1].model, rounds[-1].evaluation) if rounds else (tuned, after or before)
    assert judged is not None
    reinforce, reinforced = rl_after_evaluation(
        config, sources, prompts, last.output() if last else base, judged.output("eval")
    )
    steps += reinforce
    after_rl = evaluation(config, sources, reinforced.output(), "evaluate.after_rl") if reinforced else None
    steps += [after_rl] if after_rl is not None else []
    teacher = collect.step(
        config.collect, sources.heldout, name="collect.heldout", encyclopedia=sources.encyclopedia
    )
    report = evaluate.report_step(
        config.run_name,
        sources.heldout,
        before.output("eval"),
        after.output("eval") if after is not None else None,
        tuned.output() if tuned is not None else None,
        teacher.output("trajectories"),
        after_rl=after_rl.output("eval") if after_rl is not None else None,
        rl=reinforced.output() if reinforced is not None else None,
        rounds={r.number: (_eval(r.evaluation), r.model.output()) for r in rounds} if tuned else None,
    )
    return [*steps, teacher, report], report


def _eval(step: Step | None) -> StepInput:
    assert step is not None  # an evaluated plan evaluates every round
    return step.output("eval")


def not_planned(config: PipelineConfig, steps: Sequence[Step]) -> dict[str, str]:
    """Stage → why it has no step in this plan (not configured, or not built yet)."""
    names = {s.name.split(".")[0] for s in steps}
    out = {}
    for stage in ("collect", "curate", "convert", "student", "sft", "rl", "evaluate"):
        if stage not in names and not (stage == "student" and config.student and config.student.base):
            out[stage] = "not configured" if getattr(config, stage) is None else "needs an earlier stage"
    if config.evaluate is not None and config.synthetic is None and "evaluate" in out:
        out["evaluate"] = "needs held-out synthetic tasks"
    out.update({stage: f"not built yet: {what}" for stage, what in NOT_BUILT.items()})
    return out
