"""Nightly retraining as a plan of steps, and the ledger of nights.

A night (a date, or any label) runs :func:`nightly_plan`:

1. the configured task source (synthetic families and/or imported task sets);
2. ``nightly.new_tasks``: only the tasks whose ids no earlier night collected (the earlier nights'
   collections are inputs of this step, so its key and lineage name them);
3. ``collect`` on the new tasks (budgeted and cached by the collect stage);
4. ``nightly.merge``: tonight's runs and tasks together with the earlier nights' ones (one
   ``trajectories`` and one ``tasks`` table; a run id seen twice is kept once);
5. ``curate`` (its dedup and decontamination then work across nights), ``convert``;
6. ``sft`` from the configured base or from the champion (``promotion.sft_from``); with
   ``rounds: N``, the self-improvement rounds after it (``sample.r1`` on the merged tasks,
   ``curate.r2`` of the merged runs beside the student's correct samples, ``convert.r2``,
   ``sft.r2``…; :func:`coa.plan.choices.later_rounds`), the last round's model going on;
7. ``rl`` on tonight's RL prompts from the SFT model, when the config has an ``rl`` section (with
   ``rl.families: auto``, ``evaluate.sft`` first evaluates the SFT model on the held-out tasks and
   RL trains on the family it leaves weakest among those it solves sometimes: :mod:`coa.rl.family`);
8. ``evaluate.candidate`` (the **candidate** is the last model trained tonight: the RL model when
   RL runs, else the SFT model: :attr:`NightlyPlan.candidate`) and ``evaluate.champion`` on the
   held-out tasks (the champion's evaluation is content-addressed: reused every night until the
   champion or the tasks change);
9. ``gate``: the promotion gate's verdict (:mod:`coa.registry.step`) as an artifact. The gate
   traces the candidate's lineage, so with RL it checks the RL step's steps run as well as SFT's,
   and the curation gates behind both.

The plan is a :class:`NightlyPlan`: its steps and the ones a night reads by reference (its new tasks,
collection, merge, candidate, the two evaluations, the gate). The flow resolves the champion through
the registry and the earlier nights through the :class:`~coa.registry.ledger.Ledger` before it plans;
:mod:`coa.registry.promotion` applies the verdict to the registry and, once tonight's collection is
committed, records the night in the ledger (``{root}/nightly/{run name}/{night}.json``, one file per
night, never rewritten), which is how the next night knows what was collected before."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from coa import io
from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import step as curate
from coa.errors import UserError
from coa.nightly.step import NewTasksSummary, merge_step, new_tasks_step
from coa.plan.choices import evaluation, later_rounds, rl_after_evaluation, start_model, task_steps
from coa.plan.config import PipelineConfig, PromotionConfig
from coa.plan.runner import Plan, PlanRun, StepRunner
from coa.registry.gate import Verdict
from coa.registry.history import NightRow, NightSummaries
from coa.registry.ledger import Night
from coa.registry.promotion import Promoter, Promotion
from coa.registry.step import gate_step
from coa.settings import Settings
from coa.steps import ModelInput, Step, StepInput, StepResult, TableInput
from coa.train import step as sft

CANDIDATE_EVAL = "evaluate.candidate"
CHAMPION_EVAL = "evaluate.champion"
__all__ = ["NightResult", "NightlyPlan", "check_sections", "nightly_plan", "run_night", "tonight"]


def tonight() -> str:
    """Tonight's label: the UTC date."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NightlyPlan(Plan):
    """A night's steps and the ones the night reads by reference."""

    new_tasks: Step
    """``nightly.new_tasks``: with no new task the night stops there (:meth:`stops_after`)."""
    collected: Step
    """Tonight's collection (the ledger records it once :attr:`merged` is committed)."""
    merged: Step
    """Tonight's and the earlier nights' data, together: committed, the night is on the ledger."""
    sft: Step
    rl: Step | None
    candidate: Step
    """The step whose model is tonight's candidate (the last model trained: RL's, else SFT's)."""
    candidate_eval: Step
    champion_eval: Step | None
    """The champion's evaluation (None before the first promotion)."""
    gate: Step

    def stops_after(self, step: Step, result: StepResult) -> str | None:
        """Why the night stops after ``step`` (its new tasks: none left to collect), else None."""
        if step is self.new_tasks and NewTasksSummary.from_dict(result.summary).new == 0:
            return "no new tasks"
        return None


def nightly_plan(
    config: PipelineConfig,
    champion: ModelInput | None,
    earlier: Sequence[Night] = (),
    settings: Settings | None = None,
) -> NightlyPlan:
    """The steps of a night (see the module docstring); the gate is last.

    ``champion``: the registry's champion of ``promotion.model_name`` (resolved by the caller), None
    before the first promotion; ``earlier``: the nights whose data is curated with tonight's
    (:meth:`Ledger.before`)."""
    check_sections(config)
    assert config.collect and config.curate and config.convert and config.student and config.sft
    promotion = config.promotion or PromotionConfig()
    previous = {f"night{i}": _table(n.collected, "trajectories", settings) for i, n in enumerate(earlier)}
    previous_tasks = {f"night{i}": _table(n.tasks, "tasks", settings) for i, n in enumerate(earlier)}
    sources = task_steps(config)
    new_tasks = new_tasks_step(sources.train, previous if promotion.new_tasks_only else {})
    collected = collect.step(config.collect, new_tasks.output("tasks"), encyclopedia=sources.encyclopedia)
    merged = merge_step(collected.output("trajectories"), new_tasks.output("tasks"), previous, previous_tasks)
    raw, tasks = merged.output("trajectories"), merged.output("tasks")
    curated = curate.step(config.curate, raw, tasks)
    converted = convert.step(config.convert, curated.output("trajectories"), tasks)
    data = converted.output("sft")
    base, built = start_model(config.student, data, champion if promotion.sft_from == "champion" else None)
    tuned = sft.step(config.sft, base, data)
    rounds = later_rounds(config, sources, tuned, raw, tasks, evaluated=False)
    last = rounds[-1].model if rounds else tuned
    reinforce, reinforced = rl_after_evaluation(
        config, sources, converted.output("rl_prompts"), last.output(), None
    )
    candidate = reinforced or last
    candidate_eval = evaluation(config, sources, candidate.output(), CANDIDATE_EVAL)
    champion_eval = evaluation(config, sources, champion, CHAMPION_EVAL) if champion is not None else None
    gate = gate_step(
        promotion.model_name,
        promotion.gate,
        candidate_eval.output("eval"),
        champion_eval.output("eval") if champion_eval is not None else None,
    )
    steps = [
        *sources.steps, new_tasks, collected, merged, curated, converted, *built, tuned,
        *(s for r in rounds for s in r.steps), *reinforce, candidate_eval,
        *([champion_eval] if champion_eval is not None else []), gate,
    ]  # fmt: skip
    return NightlyPlan(
        steps=tuple(steps), curated=curated, new_tasks=new_tasks, collected=collected, merged=merged,
        sft=tuned, rl=reinforced, candidate=candidate, candidate_eval=candidate_eval,
        champion_eval=champion_eval, gate=gate,
    )  # fmt: skip


def _table(uri: str, table: str, settings: Settings | None) -> StepInput:
    return TableInput(io.open_artifact(uri, settings), table)


def check_sections(config: PipelineConfig) -> None:
    """A night needs every stage up to SFT, an evaluation and held-out synthetic tasks."""
    missing = [
        s
        for s in ("collect", "curate", "convert", "student", "sft", "evaluate")
        if getattr(config, s) is None
    ]
    if config.synthetic is None:
        missing.append("synthetic")
    if missing:
        raise UserError(
            f"nightly retraining needs the sections {', '.join(missing)} "
            "(held-out synthetic tasks are the benchmark the gate reads)"
        )


@dataclasses.dataclass(frozen=True)
class NightResult:
    """What a night did: its plan's run, and the promotion (None when the night failed or stopped
    before its gate); ``history``: the model name's rows, tonight's included (none on a failure)."""

    night: str
    plan: NightlyPlan
    run: PlanRun
    promotion: Promotion | None
    history: tuple[NightRow, ...]


def run_night(
    plan: NightlyPlan, runner: StepRunner, promoter: Promoter, night: str, gated_against: str | None
) -> NightResult:
    """Run ``plan`` through ``runner`` (:class:`~coa.plan.runner.PlanRun`): once tonight's data is
    merged the night goes on the ledger; with no new task it stops there (its history row says so);
    else the gate's verdict is applied to the registry (``gated_against``: the champion's model URI
    the candidate was gated against) and the night's history row written (:class:`Promoter`)."""
    run = PlanRun(plan)

    def after(step: Step, result: StepResult) -> str | None:
        if step is plan.merged:  # tonight's data is committed: later nights build on it whatever follows
            promoter.committed(night, run[plan.collected].ref.uri, run[plan.new_tasks].ref.uri)
        return plan.stops_after(step, result)

    run.run(runner, after=after)
    if run.failure is not None:
        return NightResult(night, plan, run, None, ())
    if run.stopped is not None:
        return NightResult(night, plan, run, None, promoter.stopped(night, run[plan.new_tasks].summary))
    evaluations = {"candidate": run[plan.candidate_eval].ref.uri}
    if (champion := run.get(plan.champion_eval)) is not None:
        evaluations["champion"] = champion.ref.uri
    summaries = NightSummaries(
        run.summary(plan.new_tasks), collect=run.summary(plan.collected), curate=run.summary(plan.curated),
        sft=run.summary(plan.sft), rl=run.summary(plan.rl),
    )  # fmt: skip
    verdict = Verdict.from_dict(run[plan.gate].summary)
    promotion = promoter.promote(
        night, run[plan.candidate].ref.uri, verdict, evaluations, gated_against, summaries
    )
    return NightResult(night, plan, run, promotion, promotion.history)
