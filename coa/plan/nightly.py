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
   RL runs, else the SFT model; :func:`candidate_step` names it) and ``evaluate.champion`` on the
   held-out tasks (the champion's evaluation is content-addressed: reused every night until the
   champion or the tasks change);
9. ``gate``: the promotion gate's verdict (:mod:`coa.registry.step`) as an artifact. The gate
   traces the candidate's lineage, so with RL it checks the RL step's steps run as well as SFT's,
   and the curation gates behind both.

The flow resolves the champion through the registry and the earlier nights through the
:class:`~coa.registry.ledger.Ledger` before it plans. It applies the verdict to the registry and,
once tonight's collection is committed, records the night in the ledger (``{root}/nightly/{run
name}/{night}.json``, one file per night, never rewritten), which is how the next night knows what
was collected before."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from coa import io
from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import step as curate
from coa.errors import UserError
from coa.nightly.step import MERGE, NEW_TASKS, MergeSummary, NewTasksSummary, merge_step, new_tasks_step
from coa.plan.choices import (
    CONVERTED_SFT,
    SFT_EVAL,
    encyclopedia,
    evaluation,
    later_rounds,
    rl_after_evaluation,
    start_model,
    task_steps,
)
from coa.plan.config import PipelineConfig, PromotionConfig
from coa.registry.ledger import Ledger, Night
from coa.registry.step import GATE, gate_step
from coa.settings import Settings
from coa.steps import ModelInput, Step, StepInput, StepResult, TableInput, Upstream
from coa.train import step as sft

MERGED_TASKS = Upstream(MERGE, "tasks")
CANDIDATE_EVAL = "evaluate.candidate"
CHAMPION_EVAL = "evaluate.champion"
__all__ = [
    "CANDIDATE_EVAL",
    "CHAMPION_EVAL",
    "GATE",
    "MERGE",
    "NEW_TASKS",
    "MergeSummary",
    "NewTasksSummary",
    "SFT_EVAL",
    "Ledger",
    "Night",
    "candidate_step",
    "check_sections",
    "merge_step",
    "new_tasks_step",
    "nightly_plan",
    "no_new_tasks",
    "tonight",
]


def tonight() -> str:
    """Tonight's label: the UTC date."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def nightly_plan(
    config: PipelineConfig,
    champion: ModelInput | None,
    earlier: Sequence[Night] = (),
    settings: Settings | None = None,
) -> list[Step]:
    """The steps of a night (see the module docstring); the gate is last.

    ``champion``: the registry's champion of ``promotion.model_name`` (resolved by the caller), None
    before the first promotion; ``earlier``: the nights whose data is curated with tonight's
    (:meth:`Ledger.before`)."""
    check_sections(config)
    assert config.collect and config.curate and config.convert and config.student and config.sft
    promotion = config.promotion or PromotionConfig()
    previous = {f"night{i}": _table(n.collected, "trajectories", settings) for i, n in enumerate(earlier)}
    previous_tasks = {f"night{i}": _table(n.tasks, "tasks", settings) for i, n in enumerate(earlier)}
    steps, source = task_steps(config)
    steps += [
        new_tasks_step(source, previous if promotion.new_tasks_only else {}),
        collect.step(config.collect, Upstream(NEW_TASKS, "tasks"), encyclopedia=encyclopedia(config)),
        merge_step(
            Upstream("collect", "trajectories"), Upstream(NEW_TASKS, "tasks"), previous, previous_tasks
        ),
        curate.step(config.curate, Upstream(MERGE, "trajectories"), MERGED_TASKS),
        convert.step(config.convert, Upstream("curate", "trajectories"), MERGED_TASKS),
    ]
    base, built = start_model(
        config.student, CONVERTED_SFT, champion if promotion.sft_from == "champion" else None
    )
    steps += [*built, sft.step(config.sft, base, CONVERTED_SFT)]
    rounds, last = later_rounds(
        config, Upstream("sft"), Upstream(MERGE, "trajectories"), MERGED_TASKS, evaluated=False
    )
    assert last is not None
    steps += rounds + rl_after_evaluation(config, last, None)
    steps.append(evaluation(config, Upstream("rl") if config.rl is not None else last, CANDIDATE_EVAL))
    if champion is not None:
        steps.append(evaluation(config, champion, CHAMPION_EVAL))
    steps.append(
        gate_step(
            promotion.model_name,
            promotion.gate,
            Upstream(CANDIDATE_EVAL, "eval"),
            Upstream(CHAMPION_EVAL, "eval") if champion is not None else None,
        )
    )
    return steps


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


def candidate_step(steps: list[Step]) -> str:
    """The step whose model is tonight's candidate: the one ``evaluate.candidate`` evaluates."""
    model = next(s for s in steps if s.name == CANDIDATE_EVAL).inputs["model"]
    if not isinstance(model, Upstream):
        raise UserError(f"{CANDIDATE_EVAL} does not evaluate a model trained tonight ({model})")
    return model.step


def no_new_tasks(result: StepResult) -> bool:
    """Whether ``nightly.new_tasks`` left no task for tonight (the night has nothing to collect)."""
    return NewTasksSummary.from_dict(result.summary).new == 0
