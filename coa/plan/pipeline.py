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
    CONVERTED_SFT,
    HELDOUT,
    collect_steps,
    encyclopedia,
    evaluation,
    later_rounds,
    rl_after_evaluation,
    round_evaluation,
    round_model,
    start_model,
    task_steps,
)
from coa.plan.config import PipelineConfig
from coa.steps import Step, Upstream
from coa.train import step as sft

NOT_BUILT: dict[str, str] = {}
"""Stages of the design that have no step yet, reported by the flow instead of being faked."""
CURATED = Upstream("curate", "trajectories")
DATA_CHAIN = ("collect", "curate", "convert", "student")
"""The sections training needs, in order: the plan stops at the first absent one."""


def plan(config: PipelineConfig) -> list[Step]:
    """The steps of a pipeline run, in order; each names its inputs by the steps they come from."""
    steps = data_steps(config)
    if all(getattr(config, section) is not None for section in DATA_CHAIN):
        steps += training_steps(config)
    return steps


def data_steps(config: PipelineConfig) -> list[Step]:
    """tasks → collect → curate → convert, up to the first stage whose section is absent."""
    steps, train = task_steps(config)
    if config.collect is None:
        return steps
    collected, raw = collect_steps(config.collect, train, encyclopedia(config))
    steps += collected
    if config.curate is not None:
        steps.append(curate.step(config.curate, raw, train))
        if config.convert is not None:
            steps.append(convert.step(config.convert, CURATED, train))
    return steps


def training_steps(config: PipelineConfig) -> list[Step]:
    """student → sft → (evaluations before/after) → later rounds → rl → (evaluation after RL,
    teacher, report)."""
    assert config.student is not None and config.collect is not None
    base, steps = start_model(config.student, CONVERTED_SFT)
    tuned = None
    if config.sft is not None:
        steps.append(sft.step(config.sft, base, CONVERTED_SFT))
        tuned = Upstream("sft")
    evaluated = config.evaluate is not None and config.synthetic is not None
    if not evaluated:  # no held-out benchmark: train only
        rounds, last = later_rounds(config, tuned, teacher_runs(config), train_tasks(config), evaluated=False)
        return steps + rounds + rl_after_evaluation(config, last or base, None)
    steps.append(evaluation(config, base, "evaluate.before"))
    if tuned is not None:
        steps.append(evaluation(config, tuned, "evaluate.after"))
    rounds, last = later_rounds(config, tuned, teacher_runs(config), train_tasks(config), evaluated=True)
    steps += rounds
    judged = Upstream(round_evaluation(config.rounds) if last is not None else "evaluate.before", "eval")
    steps += rl_after_evaluation(config, last or base, judged)
    reinforced = Upstream("rl") if config.rl is not None else None
    if reinforced is not None:
        steps.append(evaluation(config, reinforced, "evaluate.after_rl"))
    # the teacher, beside
    steps.append(
        collect.step(config.collect, HELDOUT, name="collect.heldout", encyclopedia=encyclopedia(config))
    )
    steps.append(
        evaluate.report_step(
            config.run_name,
            HELDOUT,
            Upstream("evaluate.before", "eval"),
            Upstream("evaluate.after", "eval") if tuned is not None else None,
            tuned,
            Upstream("collect.heldout", "trajectories"),
            after_rl=Upstream("evaluate.after_rl", "eval") if reinforced is not None else None,
            rl=reinforced,
            rounds={
                r: (Upstream(round_evaluation(r), "eval"), Upstream(round_model(r)))
                for r in range(2, config.rounds + 1)
            }
            if tuned is not None
            else None,
        )
    )
    return steps


def teacher_runs(config: PipelineConfig) -> Upstream:
    """The teacher's raw runs curation reads (the retry's when configured)."""
    assert config.collect is not None
    return Upstream("collect.retry" if config.collect.retry_failed else "collect", "trajectories")


def train_tasks(config: PipelineConfig) -> Upstream:
    """The table the plan trains on: the synthetic ``train`` split, else the imported tasks."""
    return Upstream("synthetic", "train") if config.synthetic is not None else Upstream("tasks", "tasks")


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
