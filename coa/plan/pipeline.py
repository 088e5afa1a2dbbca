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
    eval_tools,
    evaluation,
    rl_after_evaluation,
    start_model,
    task_steps,
)
from coa.plan.config import PipelineConfig
from coa.sample import step as sample
from coa.sample.config import SampleConfig
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
    collected, raw = collect_steps(config.collect, train)
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
        rounds, last = later_rounds(config, tuned, evaluated=False)
        return steps + rounds + rl_after_evaluation(config, last or base, None)
    steps.append(evaluation(config, base, "evaluate.before"))
    if tuned is not None:
        steps.append(evaluation(config, tuned, "evaluate.after"))
    rounds, last = later_rounds(config, tuned, evaluated=True)
    steps += rounds
    judged = Upstream(round_evaluation(config.rounds) if last is not None else "evaluate.before", "eval")
    steps += rl_after_evaluation(config, last or base, judged)
    reinforced = Upstream("rl") if config.rl is not None else None
    if reinforced is not None:
        steps.append(evaluation(config, reinforced, "evaluate.after_rl"))
    steps.append(collect.step(config.collect, HELDOUT, name="collect.heldout"))  # the teacher, beside
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


def round_model(r: int) -> str:
    """The step that fine-tunes round ``r``'s model (``sft`` for round 1, ``sft.r2``…)."""
    return "sft" if r == 1 else f"sft.r{r}"


def round_evaluation(r: int) -> str:
    """The held-out evaluation of round ``r``'s model (``evaluate.after``, ``evaluate.after_r2``…)."""
    return "evaluate.after" if r == 1 else f"evaluate.after_r{r}"


def later_rounds(
    config: PipelineConfig, first: Upstream | None, evaluated: bool
) -> tuple[list[Step], Upstream | None]:
    """Rounds 2..``config.rounds`` after the round-1 SFT model ``first``, and the last round's model.

    Round r+1: the round-r model samples the training tasks (``sample.r<r>``); curation keeps its
    verified-correct attempts beside the teacher's runs (``curate.r<r+1>``), conversion renders them
    (``convert.r<r+1>``) and SFT fine-tunes the round-r model on them (``sft.r<r+1>``, the ``sft``
    section with ``round_sft`` over it), then (``evaluated``) its held-out evaluation
    (``evaluate.after_r<r+1>``). No SFT (``first`` None) or one round: no steps.
    """
    if first is None or config.rounds == 1:
        return [], first
    assert config.collect is not None and config.curate is not None and config.convert is not None
    later = config.later_sft()
    assert later is not None
    sampling = (config.sampling or SampleConfig()).model_copy(
        update={
            "prompt_style": (config.sampling and config.sampling.prompt_style) or config.convert.prompt_style,
            "variants": config.convert.variants
            if config.sampling is None or config.sampling.variants is None
            else config.sampling.variants,
        }
    )
    train = train_tasks(config)
    raw = Upstream("collect.retry" if config.collect.retry_failed else "collect", "trajectories")
    steps: list[Step] = []
    model = first
    for r in range(2, config.rounds + 1):
        samples = f"sample.r{r - 1}"
        steps.append(sample.step(sampling, eval_tools(config), model, train, r - 1, name=samples))
        steps.append(
            curate.step(config.curate, raw, train, name=f"curate.r{r}", student=Upstream(samples, "rollouts"))
        )
        steps.append(
            convert.step(
                config.convert, Upstream(f"curate.r{r}", "trajectories"), train, name=f"convert.r{r}"
            )
        )
        steps.append(sft.step(later, model, Upstream(f"convert.r{r}", "sft"), round_model(r)))
        model = Upstream(round_model(r))
        if evaluated:
            steps.append(evaluation(config, model, round_evaluation(r)))
    return steps, model


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
