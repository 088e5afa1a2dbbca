"""The choices every plan shares, written once: where the data comes from, which model SFT starts
from, what RL reads, which tools the student gets and the encyclopedia every local search serves.

The pipeline plan (:mod:`coa.plan.pipeline`), the nightly plan (:mod:`coa.plan.nightly`) and the
CLI's one-stage commands (``coa sft``, ``coa evaluate``) call these, so a night and a pipeline run
with the same sections build the same steps where they overlap.
"""

from __future__ import annotations

import dataclasses

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

SFT_EVAL = "evaluate.sft"
"""The evaluation of the model RL starts from, when the plan has none yet (``rl.families: auto``)."""


@dataclasses.dataclass(frozen=True)
class Sources:
    """A plan's task sources (synthetic families and/or imported task sets) and what later steps read
    of them, by reference to the step that writes it."""

    synthetic: Step | None
    imported: Step | None

    @property
    def steps(self) -> list[Step]:
        return [s for s in (self.synthetic, self.imported) if s is not None]

    @property
    def train(self) -> Upstream:
        """The table to train on: the synthetic ``train`` split, else the imported tasks."""
        if self.synthetic is not None:
            return self.synthetic.output("train")
        assert self.imported is not None
        return self.imported.output("tasks")

    @property
    def heldout(self) -> Upstream | None:
        """The held-out synthetic tasks every evaluation reads (None without a ``synthetic`` section)."""
        return self.synthetic.output("heldout") if self.synthetic is not None else None

    @property
    def encyclopedia(self) -> Upstream | None:
        """What every local search of the plan serves: the synthetic step's ``encyclopedia`` table (the
        documents the multi-hop tasks were drawn from), handed to collect, evaluate, sample and RL as
        an input, so its content hash is in their keys; None without a ``synthetic`` section (a local
        search then refuses to start, saying so)."""
        return self.synthetic.output(synthetic.ENCYCLOPEDIA_TABLE) if self.synthetic is not None else None


def task_steps(config: PipelineConfig) -> Sources:
    """The task sources: synthetic families and/or imported task sets (at least one)."""
    sources = Sources(
        synthetic.step(config.synthetic) if config.synthetic is not None else None,
        tasksets.step(config.tasks) if config.tasks.sources else None,
    )
    if not sources.steps:
        raise UserError("no tasks: configure `synthetic` or `tasks.sources` (see configs/demo.yaml)")
    return sources


def collect_steps(
    config: CollectConfig, tasks: StepInput, documents: StepInput | None = None
) -> tuple[list[Step], Upstream]:
    """Teacher collection on ``tasks`` (and its retry of the failed runs when configured), its local
    search serving ``documents`` (:attr:`Sources.encyclopedia`), and the runs curation reads."""
    first = collect.step(config, tasks, encyclopedia=documents)
    if not config.retry_failed:
        return [first], first.output("trajectories")
    retry = collect.retry_step(config, first.output("trajectories"), tasks, encyclopedia=documents)
    return [first, retry], retry.output("trajectories")


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
    built = student.step(config, data)
    return built.output(), [built]


def eval_tools(config: PipelineConfig) -> ToolsConfig:
    """The tools the student gets: the evaluate section's, else the teacher's, else the defaults."""
    if config.evaluate is not None and config.evaluate.tools is not None:
        return config.evaluate.tools
    return config.collect.tools if config.collect is not None else ToolsConfig()


def evaluation(config: PipelineConfig, sources: Sources, model: StepInput, name: str) -> Step:
    """``model`` on the held-out synthetic tasks (the ``evaluate`` section; the plan checked it is set)."""
    if config.evaluate is None or sources.heldout is None:
        raise UserError(f"{name} needs an `evaluate` section and held-out synthetic tasks")
    tools, documents = eval_tools(config), sources.encyclopedia
    return evaluate.step(config.evaluate, tools, sources.heldout, model, name=name, encyclopedia=documents)


def rl_after_evaluation(
    config: PipelineConfig, sources: Sources, prompts: StepInput, start: StepInput, judged: StepInput | None
) -> tuple[list[Step], Step | None]:
    """RL from ``start`` on the converted RL ``prompts``: its steps, and the RL step (None without an
    ``rl`` section).

    With ``rl.families: auto`` RL picks its family from an evaluation of ``start`` on the held-out
    tasks: ``judged`` when the plan already evaluates ``start``, else ``evaluate.sft`` runs first
    (when there are held-out tasks and an ``evaluate`` section; without them :func:`coa.rl.step.step`
    says what to configure). Named families read no evaluation."""
    if config.rl is None:
        return [], None
    steps: list[Step] = []
    can_evaluate = config.evaluate is not None and config.synthetic is not None
    if config.rl.families == "auto" and judged is None and can_evaluate:
        steps.append(evaluation(config, sources, start, SFT_EVAL))
        judged = steps[-1].output("eval")
    steps.append(rl.step(config.rl, start, prompts, evaluation=judged, encyclopedia=sources.encyclopedia))
    return steps, steps[-1]


def round_model(r: int) -> str:
    """The step that fine-tunes round ``r``'s model (``sft`` for round 1, ``sft.r2``…)."""
    return "sft" if r == 1 else f"sft.r{r}"


def round_evaluation(r: int) -> str:
    """The held-out evaluation of round ``r``'s model (``evaluate.after``, ``evaluate.after_r2``…)."""
    return "evaluate.after" if r == 1 else f"evaluate.after_r{r}"


@dataclasses.dataclass(frozen=True)
class Round:
    """One self-improvement round (2..): its steps, the step of its model and its held-out evaluation
    (None when the plan evaluates no round)."""

    number: int
    steps: tuple[Step, ...]
    model: Step
    evaluation: Step | None


def later_rounds(
    config: PipelineConfig,
    sources: Sources,
    first: Step | None,
    raw: StepInput,
    train: StepInput,
    evaluated: bool,
) -> list[Round]:
    """Rounds 2..``config.rounds`` after the round-1 SFT step ``first``; the last one's model goes on.

    Round r+1: the round-r model samples the training tasks ``train`` (``sample.r<r>``); curation
    keeps its verified-correct attempts beside the teacher's runs ``raw`` (``curate.r<r+1>``),
    conversion renders them (``convert.r<r+1>``) and SFT fine-tunes the round-r model on them
    (``sft.r<r+1>``, the ``sft`` section with ``round_sft`` over it), then (``evaluated``) its
    held-out evaluation (``evaluate.after_r<r+1>``). No SFT (``first`` None) or one round: no steps.
    """
    if first is None or config.rounds == 1:
        return []
    assert config.curate is not None and config.convert is not None
    later = config.later_sft()
    assert later is not None
    sampling = config.sampling or SampleConfig()  # its prompts: the model's, from its lineage
    rounds: list[Round] = []
    model = first
    for r in range(2, config.rounds + 1):
        samples = sample.step(
            sampling, eval_tools(config), model.output(), train, r - 1, name=f"sample.r{r - 1}",
            encyclopedia=sources.encyclopedia,
        )  # fmt: skip
        curated = curate.step(
            config.curate, raw, train, name=f"curate.r{r}", student=samples.output("rollouts")
        )
        converted = convert.step(config.convert, curated.output("trajectories"), train, name=f"convert.r{r}")
        model = sft.step(later, model.output(), converted.output("sft"), round_model(r))
        judged = evaluation(config, sources, model.output(), round_evaluation(r)) if evaluated else None
        steps = (samples, curated, converted, model) + ((judged,) if judged is not None else ())
        rounds.append(Round(r, steps, model, judged))
    return rounds
