"""How each stage's command makes its step: one entry per stage of :data:`coa.plan.stages.STAGES`.

A :class:`Command` holds what the stage declaration does not: the call of the stage's constructor
(``make``: the step from what the command was given, :class:`~coa._cli.given.Given`), which of its
inputs are models, and the options a stage has beyond its inputs and its profile section. Everything
else of a command (its options for the inputs, ``--table``, ``--config`` and the overrides, its help,
running the step through the one runner, what it prints) is generated from the stage's declaration
(:mod:`coa._cli.stages`). :data:`ALIASES` keeps today's command names (``coa collect``, ``coa tasks
synthetic``, ``coa model init``…) and their option names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from coa._cli.common import err
from coa._cli.given import Given
from coa.errors import UserError
from coa.steps import Step, StepResult, TableInput


@dataclasses.dataclass(frozen=True)
class Extra:
    """An option of a command beyond its inputs and its profile: a typer-annotated parameter."""

    name: str
    annotation: Any
    default: Any = None


@dataclasses.dataclass(frozen=True)
class Command:
    """What a stage's command adds to its stage's declaration (see the module docstring)."""

    stage: str
    make: Callable[[Given], Step]
    section: str | None = None
    """The profile section the overrides' example names; None: the command reads no profile."""
    models: tuple[str, ...] = ()
    """Input roles that take a model (a folder, hub id, model artifact or ``champion:NAME``)."""
    flags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Input role → today's option name, kept beside ``--<role>`` (``base`` → ``--model``)."""
    argument: str | None = None
    """An input role given as the first argument instead of an option (``coa eval-report URI``)."""
    extras: tuple[Extra, ...] = ()
    fill: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Input role → the role whose artifact provides it when it is not given (a synthetic task set
    carries the encyclopedia its questions were drawn from)."""
    prefer: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Input role → the table read when the artifact has several of its contract."""
    inputs: bool = True
    """Whether the stage's inputs are options (``coa tasks import`` takes files instead)."""
    without: tuple[str, ...] = ()
    """Input roles of the stage its command does not read (scored predictions search nothing)."""
    shards: bool = False
    """Whether its step's shards run where ``execution.engine`` says (collection, curation)."""
    logs: str | None = None
    """A logger shown at INFO while the step runs (the trainers' progress lines)."""
    then: Callable[[Given, StepResult], Step | None] | None = None
    """A step run after the first, from its result (collection's retry of its failed runs)."""
    said: Callable[[StepResult], None] | None = None
    """What the command says on stderr after each step, beside the facts its stage presents."""
    about: str = ""


ENCYCLOPEDIA = "encyclopedia"
FROM_TASKS = {ENCYCLOPEDIA: "tasks"}


def _tasks_import(g: Given) -> Step:
    from coa.tasksets import TasksConfig
    from coa.tasksets import step as tasksets
    from coa.tasksets.config import TaskSourceConfig

    o = g.options
    if o["name"] and len(o["sources"]) > 1:
        raise UserError("--name applies to a single source; give one SRC or set names in a config file")
    if o["family"] is not None and o["family"] not in ("web", "mhqa", "math", "code"):
        raise UserError(f"--family must be one of web, mhqa, math, code (got {o['family']!r})")
    sources = tuple(
        TaskSourceConfig(path=s, name=o["name"], family=o["family"], limit=o["limit"]) for s in o["sources"]
    )
    return tasksets.step(TasksConfig(name=o["artifact"], sources=sources))


def _tasks(g: Given) -> Step:
    from coa.tasksets import step as tasksets

    return tasksets.step(g.section("tasks"))


def _synthetic(g: Given) -> Step:
    from coa.synthetic import step as synthetic

    return synthetic.step(g.section("synthetic"))


def _collect(g: Given) -> Step:
    from coa.collect import step as collect

    return collect.step(g.section("collect"), g.input("tasks"), encyclopedia=g.optional(ENCYCLOPEDIA))


def _retry(g: Given) -> Step:
    from coa.collect import step as collect

    config = g.section("collect")
    return collect.retry_step(
        config, g.input("previous"), g.input("tasks"), encyclopedia=g.optional(ENCYCLOPEDIA)
    )


def _retry_after(g: Given, first: StepResult) -> Step | None:
    """``--retry-failed`` (or ``collect.retry_failed``): re-run the failed runs of ``first``."""
    from coa.collect import step as collect
    from coa.collect.summary import CollectSummary

    config = g.section("collect")
    if not (g.options["retry_failed"] or config.retry_failed):
        return None
    failed = CollectSummary.from_dict(first.summary).statuses.get(collect.FAILED_STATUS, 0)
    err.print(f"retrying {failed} failed run(s) of {first.ref.uri}", highlight=False)
    previous = TableInput(first.ref, collect.TABLE)
    return collect.retry_step(config, previous, g.input("tasks"), encyclopedia=g.optional(ENCYCLOPEDIA))


def _say_collected(result: StepResult) -> None:
    from coa.collect.summary import CollectSummary

    s = CollectSummary.from_dict(result.summary)
    if s.collect is not None and s.collect.resumed:
        err.print(
            f"resumed {s.collect.resumed} of {s.collect.planned} runs from checkpoints", highlight=False
        )
    if s.repaired is not None:
        r = s.repaired
        err.print(
            f"retried {r.retried} failed run(s): {r.requests_sent} LLM request(s) sent, {r.still_failed} "
            "still failed",
            highlight=False,
        )


def _curate(g: Given) -> Step:
    from coa.curate import step as curate

    return curate.step(g.section("curate"), g.input("raw"), g.input("tasks"), student=g.optional("student"))


def _sample(g: Given) -> Step:
    from coa.plan.choices import eval_tools
    from coa.sample import step as sample
    from coa.sample.config import SampleConfig

    round_ = g.options["round"]
    return sample.step(
        g.profile.sampling or SampleConfig(),  # its prompts: the model's, from its lineage
        eval_tools(g.profile),
        g.input("model"),
        g.input("tasks"),
        round_,
        name=f"sample.r{round_}",
        encyclopedia=g.optional(ENCYCLOPEDIA),
    )


def _convert(g: Given) -> Step:
    from coa.convert import step as convert

    return convert.step(g.section("convert"), g.input("curated"), g.input("tasks"))


def _student(g: Given) -> Step:
    from coa.model import step as student
    from coa.model.config import StudentConfig

    config = g.profile.student or StudentConfig()
    if config.base is not None:
        raise UserError(
            f"student.base is {config.base!r}: nothing to build (unset it to build the tiny model)"
        )
    return student.step(config, g.input("data"))


def _sft(g: Given) -> Step:
    from coa.model.config import StudentConfig
    from coa.plan.choices import start_model
    from coa.steps import ModelInput
    from coa.train import step as sft

    config = g.section("sft")
    examples = g.input("data")
    base, first = start_model(g.profile.student or StudentConfig(), examples, g.optional("base"))
    for built in first:  # the tiny student, built on the examples' texts
        base = ModelInput(ref=g.run(built).ref)
    return sft.step(config, base, examples)


def _rl(g: Given) -> Step:
    from coa.rl import step as rl

    return rl.step(
        g.section("rl"), g.input("base"), g.input("prompts"),
        evaluation=g.optional("evaluation"), encyclopedia=g.optional(ENCYCLOPEDIA),
    )  # fmt: skip


def _eval_config(g: Given) -> Any:
    """The evaluate section (its defaults without one) with ``--limit`` and ``--samples``."""
    from coa.evaluate.config import EvalConfig

    update = {k: g.options[o] for k, o in (("limit_per_benchmark", "limit"), ("samples", "samples"))
              if g.options.get(o) is not None}  # fmt: skip
    return (g.profile.evaluate or EvalConfig()).model_copy(update=update)


def _evaluate(g: Given) -> Step:
    from coa.evaluate import step as evaluate
    from coa.plan.choices import eval_tools

    if g.options["predictions"]:
        return _predictions(g)
    if "model" not in g.inputs:
        raise UserError(f"{g.command} needs --model (or --predictions FILE to score predictions)")
    return evaluate.step(
        _eval_config(g), eval_tools(g.profile), g.optional("tasks"), g.input("model"),
        encyclopedia=g.optional(ENCYCLOPEDIA),
    )  # fmt: skip


def _predictions(g: Given) -> Step:
    from coa.evaluate import step as evaluate

    files = [str(p) for p in g.options["predictions"] or ()]
    if not files:
        raise UserError(f"{g.command} needs --predictions FILE (a JSONL of task_id, prediction)")
    return evaluate.predictions_step(_eval_config(g), g.optional("tasks"), files)


def _eval_report(g: Given) -> Step:
    from coa.evaluate import step as evaluate

    return evaluate.eval_report_step(
        "eval-report", g.input("candidate"), teacher=g.optional("teacher"), tasks=g.optional("tasks"),
        baseline=g.optional("baseline"),
    )  # fmt: skip


def _report(g: Given) -> Step:
    from coa.evaluate import step as evaluate

    return evaluate.report_step(
        g.options["run_name"], g.input("tasks"), g.input("before"), g.optional("after"), g.optional("sft"),
        g.optional("teacher"), after_rl=g.optional("after_rl"), rl=g.optional("rl"),
    )  # fmt: skip


def _nights(g: Given, option: str, contract: str) -> dict[str, Any]:
    """``night0``, ``night1``… → the tables given by the repeated ``option`` (earlier nights' data)."""
    from coa._cli.given import read_table

    uris = g.options[option] or ()
    flag = f"--{option.replace('_', '-')}"
    return {f"night{i}": read_table(flag, uri, contract, command_names()) for i, uri in enumerate(uris)}


def _new_tasks(g: Given) -> Step:
    from coa.nightly import step as nightly

    return nightly.new_tasks_step(g.input("tasks"), _nights(g, "previous", "trajectory.v1"))


def _merge(g: Given) -> Step:
    from coa.nightly import step as nightly

    previous, previous_tasks = (
        _nights(g, "previous", "trajectory.v1"),
        _nights(g, "previous_tasks", "task.v1"),
    )
    return nightly.merge_step(g.input("raw"), g.input("tasks"), previous, previous_tasks)


def _gate(g: Given) -> Step:
    from coa.plan.config import PromotionConfig
    from coa.registry import step as registry

    promotion = g.profile.promotion or PromotionConfig()
    return registry.gate_step(
        promotion.model_name, promotion.gate, g.input("candidate"), g.optional("champion")
    )


def _opt(kind: Any, *decls: str, **how: Any) -> Any:
    return Annotated[kind, typer.Option(*decls, **how)]


_LIMIT = Extra("limit", _opt(int | None, "--limit", help="First N tasks of each benchmark", min=1))
_PREDICTIONS = Extra(
    "predictions",
    _opt(list[Path] | None, "--predictions", help="Score these prediction files instead of running a model"),
)
_PREVIOUS = Extra(
    "previous", _opt(list[str] | None, "--previous", help="An earlier night's collection (repeat)")
)
_RESUMES = "Checkpointed: resumes after a crash or a kill."

COMMANDS: Mapping[str, Command] = {
    c.stage: c
    for c in (
        Command("synthetic", _synthetic, section="synthetic"),
        Command("tasks", _tasks, section="tasks", about="Task files named in the profile's tasks section."),
        Command(
            "collect",
            _collect,
            section="collect",
            fill=FROM_TASKS,
            shards=True,
            then=_retry_after,
            said=_say_collected,
            about=_RESUMES,
            extras=(
                Extra(
                    "retry_failed",
                    _opt(
                        bool,
                        "--retry-failed",
                        help="Then re-run only the runs that "
                        "ended in an error, into a new artifact that keeps the rest (also: "
                        "collect.retry_failed=true)",
                    ),
                    False,
                ),
            ),
        ),
        Command("collect.retry", _retry, section="collect", fill=FROM_TASKS, said=_say_collected),
        Command("curate", _curate, section="curate", shards=True, about="Writes the data-quality report."),
        Command(
            "sample",
            _sample,
            section="sampling",
            models=("model",),
            fill=FROM_TASKS,
            extras=(Extra("round", _opt(int, "--round", help="The round the model ends", min=1), 1),),
        ),
        Command("convert", _convert, section="convert"),
        Command("student", _student, section="student"),
        Command(
            "sft",
            _sft,
            section="sft",
            models=("base",),
            flags={"base": "--model"},
            logs="coa.train.sft",
            about="Without --model: the config's base, else the tiny student built first. " + _RESUMES,
        ),
        Command(
            "rl",
            _rl,
            section="rl",
            models=("base",),
            logs="coa.rl",
            about=_RESUMES,
            flags={"base": "--model", "prompts": "--data", "evaluation": "--eval"},
        ),
        Command(
            "evaluate",
            _evaluate,
            section="evaluate",
            models=("model",),
            fill=FROM_TASKS,
            prefer={"tasks": "heldout"},
            extras=(
                _LIMIT,
                Extra(
                    "samples", _opt(int | None, "--samples", help="Episodes per task (pass@k, maj@k)", min=1)
                ),
                _PREDICTIONS,
            ),
            about="Without --tasks: the benchmarks of evaluate.benchmarks. With --predictions, score "
            "prediction files instead (as `coa score`).",
        ),
        Command(
            "evaluate.predictions",
            _predictions,
            section="evaluate",
            prefer={"tasks": "heldout"},
            without=(ENCYCLOPEDIA,),
            extras=(_PREDICTIONS, _LIMIT),
        ),
        Command("eval-report", _eval_report, argument="candidate"),
        Command(
            "report",
            _report,
            models=("sft", "rl"),
            extras=(Extra("run_name", _opt(str, "--run-name", help="The run reported (run_name)"), "coa"),),
        ),
        Command("nightly.new_tasks", _new_tasks, extras=(_PREVIOUS,)),
        Command(
            "nightly.merge",
            _merge,
            extras=(
                _PREVIOUS,
                Extra(
                    "previous_tasks",
                    _opt(list[str] | None, "--previous-tasks", help="An earlier night's tasks (repeat)"),
                ),
            ),
        ),
        Command("gate", _gate, section="promotion"),
    )
}
"""Stage name → its command (``coa stage NAME``)."""

_SOURCES = "Task files (.json/.jsonl/.parquet) or datasets folders"
_FAMILIES = "web|mhqa|math|code"
_IMPORT = Command(
    "tasks",
    _tasks_import,
    inputs=False,
    about="The artifact is the one the pipeline builds from a profile whose `tasks` section lists the "
    "same files with the same settings (same key, reused by either).",
    extras=(
        Extra("sources", Annotated[list[str], typer.Argument(help=_SOURCES)], ...),
        Extra(
            "family",
            _opt(str | None, "--family", help="Family for plain question/answer files: " + _FAMILIES),
        ),
        Extra("name", _opt(str | None, "--name", help="Source name for task ids (only with one SRC)")),
        Extra("limit", _opt(int | None, "--limit", help="Keep the first N usable rows of each source")),
        Extra("artifact", _opt(str, "--artifact", help="Artifact name (tasks.name in a profile)"), "tasks"),
    ),
)

ALIASES: tuple[tuple[str, Command], ...] = (
    ("tasks import", _IMPORT),
    ("tasks synthetic", COMMANDS["synthetic"]),
    ("collect", COMMANDS["collect"]),
    ("curate", COMMANDS["curate"]),
    ("convert", COMMANDS["convert"]),
    ("model init", COMMANDS["student"]),
    ("sft", COMMANDS["sft"]),
    ("rl", COMMANDS["rl"]),
    ("evaluate", COMMANDS["evaluate"]),
    ("eval-report", COMMANDS["eval-report"]),
)
"""Today's command names (``coa collect``…), kept: the same commands as ``coa stage NAME``."""


def command_names() -> dict[str, str]:
    """Stage name → the command a user types for it: its first kept name, else ``coa stage NAME``."""
    from coa.plan.stages import STAGES  # the stage table, loaded when a command runs

    names = {name: f"coa stage {name}" for name in STAGES}
    for path, command in reversed(ALIASES):
        names[command.stage] = f"coa {path}"
    return names
