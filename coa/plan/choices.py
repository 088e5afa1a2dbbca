"""The choices every plan shares, written once: where the data comes from, which model SFT starts
from, what RL reads, which tools the student gets and the encyclopedia every local search serves.

The pipeline plan (:mod:`coa.plan.pipeline`), the nightly plan (:mod:`coa.plan.nightly`) and the
CLI's one-stage commands (``coa sft``, ``coa evaluate``) call these, so a night and a pipeline run
with the same sections build the same steps where they overlap.
"""

from __future__ import annotations

from coa.collect import step as collect
from coa.collect.config import CollectConfig
from coa.convert import step as convert
from coa.curate import step as curate
from coa.errors import UserError
from coa.evaluate import step as evaluate
from coa.model import step as student
from coa.model.config import StudentConfig
from coa.plan.config import PipelineConfig
from coa.rl import step as rl
from coa.sample import step as sample
from coa.sample.config import SampleConfig
from coa.steps import ModelInput, Step, StepInput, Upstream
from coa.synthetic import step as synthetic
from coa.tasksets import step as tasksets
from coa.tools.config import ToolsConfig
from coa.train import step as sft

HELDOUT = Upstream("synthetic", "heldout")
ENCYCLOPEDIA = Upstream("synthetic", synthetic.ENCYCLOPEDIA_TABLE)
CONVERTED_SFT = Upstream("convert", "sft")
RL_PROMPTS = Upstream("convert", "rl_prompts")
SFT_EVAL = "evaluate.sft"
"""The evaluation of the model RL starts from, when the plan has none yet (``rl.families: auto``)."""


def task_steps(config: PipelineConfig) -> tuple[list[Step], Upstream]:
    """The task sources (synthetic families and/or imported task sets) and the table to train on:
    the synthetic ``train`` split, else the imported tasks."""
    steps: list[Step] = []
    if config.synthetic is not None:
        steps.append(synthetic.step(config.synthetic))
    if config.tasks.sources:
        steps.append(tasksets.step(config.tasks))
    if not steps:
        raise UserError("no tasks: configure `synthetic` or `tasks.sources` (see configs/demo.yaml)")
    train = Upstream("synthetic", "train") if config.synthetic is not None else Upstream("tasks", "tasks")
    return steps, train


def encyclopedia(config: PipelineConfig) -> Upstream | None:
    """What every local search of the plan serves: the synthetic step's ``encyclopedia`` table (the
    documents the multi-hop tasks were drawn from), handed to collect, evaluate, sample and RL as an
    input, so its content hash is in their keys; None without a ``synthetic`` section (a local
    search then refuses to start, saying so)."""
    return ENCYCLOPEDIA if config.synthetic is not None else None


def collect_steps(
    config: CollectConfig, tasks: StepInput, documents: StepInput | None = None
) -> tuple[list[Step], Upstream]:
    """Teacher collection on ``tasks`` (and its retry of the failed runs when configured), its local
    search serving ``documents`` (:func:`encyclopedia`), and the runs curation reads."""
    steps = [collect.step(config, tasks, encyclopedia=documents)]
    if not config.retry_failed:
        return steps, Upstream("collect", "trajectories")
    steps.append(
        collect.retry_step(config, Upstream("collect", "trajectories"), tasks, encyclopedia=documents)
    )
    return steps, Upstream("collect.retry", "trajectories")


def start_model(
    config: StudentConfig, data: StepInput, champion: StepInput | None = None
) -> tuple[StepInput, list[Step]]:
    """The model SFT starts from, and the step that builds it first (if any).

    ``champion`` (the registry's champion with ``promotion.sft_from: champion``, or a model named on
    the command line) when given, else the configured base (``student.base``: a folder or hub id),
    else the tiny student built on ``data``'s SFT texts."""
    if champion is not None:
        return champion, []
    if config.base is not None:
        return ModelInput(external=config.base), []
    return Upstream("student"), [student.step(config, data)]


def eval_tools(config: PipelineConfig) -> ToolsConfig:
    """The tools the student gets: the evaluate section's, else the teacher's, else the defaults."""
    if config.evaluate is not None and config.evaluate.tools is not None:
        return config.evaluate.tools
    return config.collect.tools if config.collect is not None else ToolsConfig()


def evaluation(config: PipelineConfig, model: StepInput, name: str) -> Step:
    """``model`` on the held-out synthetic tasks (the ``evaluate`` section; the plan checked it is set)."""
    if config.evaluate is None:
        raise UserError(f"{name} needs an `evaluate` section")
    return evaluate.step(
        config.evaluate, eval_tools(config), HELDOUT, model, name=name, encyclopedia=encyclopedia(config)
    )


def rl_after_evaluation(config: PipelineConfig, start: StepInput, judged: StepInput | None) -> list[Step]:
    """RL from ``start`` on the converted RL prompts.

    With ``rl.families: auto`` RL picks its family from an evaluation of ``start`` on the held-out
    tasks: ``judged`` when the plan already evaluates ``start``, else ``evaluate.sft`` runs first
    (when there are held-out tasks and an ``evaluate`` section; without them :func:`coa.rl.step.step`
    says what to configure). Named families read no evaluation."""
    if config.rl is None:
        return []
    steps: list[Step] = []
    can_evaluate = config.evaluate is not None and config.synthetic is not None
    if config.rl.families == "auto" and judged is None and can_evaluate:
        steps.append(evaluation(config, start, SFT_EVAL))
        judged = Upstream(SFT_EVAL, "eval")
    steps.append(rl.step(config.rl, start, RL_PROMPTS, evaluation=judged, encyclopedia=encyclopedia(config)))
    return steps


def round_model(r: int) -> str:
    """The step that fine-tunes round ``r``'s model (``sft`` for round 1, ``sft.r2``…)."""
    return "sft" if r == 1 else f"sft.r{r}"


def round_evaluation(r: int) -> str:
    """The held-out evaluation of round ``r``'s model (``evaluate.after``, ``evaluate.after_r2``…)."""
    return "evaluate.after" if r == 1 else f"evaluate.after_r{r}"


def later_rounds(
    config: PipelineConfig, first: Upstream | None, raw: StepInput, train: StepInput, evaluated: bool
) -> tuple[list[Step], Upstream | None]:
    """Rounds 2..``config.rounds`` after the round-1 SFT model ``first``, and the last round's model.

    Round r+1: the round-r model samples the training tasks ``train`` (``sample.r<r>``); curation
    keeps its verified-correct attempts beside the teacher's runs ``raw`` (``curate.r<r+1>``),
    conversion renders them (``convert.r<r+1>``) and SFT fine-tunes the round-r model on them
    (``sft.r<r+1>``, the ``sft`` section with ``round_sft`` over it), then (``evaluated``) its
    held-out evaluation (``evaluate.after_r<r+1>``). No SFT (``first`` None) or one round: no steps.
    """
    if first is None or config.rounds == 1:
        return [], first
    assert config.curate is not None and config.convert is not None
    later = config.later_sft()
    assert later is not None
    sampling = config.sampling or SampleConfig()  # its prompts: the model's, from its lineage
    steps: list[Step] = []
    model = first
    for r in range(2, config.rounds + 1):
        samples = f"sample.r{r - 1}"
        steps.append(
            sample.step(
                sampling,
                eval_tools(config),
                model,
                train,
                r - 1,
                name=samples,
                encyclopedia=encyclopedia(config),
            )
        )
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
