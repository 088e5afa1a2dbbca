"""Every stage's command, generated from the stage table: ``coa stage NAME`` for each stage of
:data:`coa.plan.stages.STAGES`, and today's names (``coa collect``, ``coa tasks synthetic``, ``coa
model init``…, :data:`coa._cli.commands.ALIASES`) for the same commands.

A command's options come from its stage's declaration (:class:`coa.steps.Stage`): one option per
input role (``--tasks``, ``--curated``…: an artifact URI whose table of the role's contract it reads,
:mod:`coa._cli.given`; a model role takes a folder, hub id, model artifact or ``champion:NAME``),
``--table`` for a task input, ``--config``/``-c`` and ``KEY=VALUE`` overrides of the profile, and what
its :class:`~coa._cli.commands.Command` adds. Each builds the same :class:`~coa.steps.Step` the
pipeline's plan builds, with its stage's constructor, and runs it through the one runner
(:func:`coa._cli.common._run`, :func:`coa.steps.run_step`), so ``coa collect …`` and the flow give
the same artifact for the same inputs. It prints the artifact's URI on a line of its own
(``trajectories: URI``; a task set's bare URI last, what scripts capture) and what the step's stage
presents (:func:`coa._cli.facts.show_step`: the facts the Prefect layer publishes).
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from coa._cli.commands import ALIASES, COMMANDS, Command, Extra, command_names
from coa._cli.common import _run
from coa._cli.given import Given, made_by, read_input
from coa.inputs import TableInput, accepted_contracts
from coa.steps import Stage, Step, StepResult

PROFILE = Path("configs/demo.yaml")
Contract = str | tuple[str, ...] | None
"""What an input role reads: a table of this contract (or one of these), or a model (None)."""


def _stages() -> Mapping[str, Stage]:
    from coa.plan.stages import STAGES

    return STAGES


def offered(stage: Stage, command: Command) -> dict[str, Contract]:
    """Input role → its contract, for each input the command takes: the stage's table roles (not the
    patterns: ``after_r*``, an earlier night's ``*``) and the command's model roles."""
    if not command.inputs:
        return {}
    found: dict[str, Contract] = {r: c for r, c in stage.expects.items() if r.isidentifier()}
    found |= {r: None for r in command.models}
    return {r: c for r, c in found.items() if r not in command.without}


def _flags(command: Command, role: str) -> tuple[str, ...]:
    """The option names of ``role``: today's name first where one is kept, then ``--<role>``."""
    own = f"--{role.replace('_', '-')}"
    kept = command.flags.get(role)
    return (kept, own) if kept else (own,)


def _role_help(contract: Contract, names: Mapping[str, str]) -> str:
    if contract is None:
        return f"a model: folder, hub id, model artifact (from {made_by(('model',), names)}) or champion:NAME"
    kinds = " or ".join(accepted_contracts(contract))
    return f"an artifact whose {kinds} table it reads (from {made_by(accepted_contracts(contract), names)})"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _is_argument(extra: Extra) -> bool:
    return any(isinstance(m, typer.models.ArgumentInfo) for m in typing.get_args(extra.annotation)[1:])


def _parameter(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    empty = default is ... or default is inspect.Parameter.empty
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
        default=inspect.Parameter.empty if empty else default,
    )  # fmt: skip


def parameters(stage: Stage, command: Command, names: Mapping[str, str]) -> list[inspect.Parameter]:
    """The command's parameters, in the order its help lists them (arguments in their order)."""
    roles = offered(stage, command)
    params = [_parameter(e.name, e.annotation, e.default) for e in command.extras if _is_argument(e)]
    if command.argument is not None:
        help_ = _role_help(roles[command.argument], names)
        params.append(_parameter(command.argument, Annotated[str, typer.Argument(help=_capital(help_))], ...))
    for role, contract in roles.items():
        if role != command.argument:
            option = typer.Option(*_flags(command, role), help=_capital(_role_help(contract, names)))
            params.append(_parameter(role, Annotated[str | None, option]))
    if "tasks" in roles:
        default = command.prefer.get("tasks")
        said = f"{default} if it has one, else its first" if default else "its first"
        table_help = f"Table of the task artifact (default: {said} task.v1 table)"
        params.append(_parameter("table", Annotated[str | None, typer.Option(help=table_help)]))
    params += [_parameter(e.name, e.annotation, e.default) for e in command.extras if not _is_argument(e)]
    if command.section is not None:
        config = typer.Option("--config", "-c", help=f"YAML profile (its {command.section} section)")
        params.append(_parameter("config", Annotated[Path, config], PROFILE))
        example = f"Overrides of the profile, KEY=VALUE (e.g. {command.section}.FIELD=VALUE)"
        params.append(_parameter("overrides", Annotated[list[str] | None, typer.Argument(help=example)]))
    return params


def _help(stage: Stage, command: Command) -> str:
    about = f"\n\n{command.about}" if command.about else ""
    return f"{stage.describe[:1].upper()}{stage.describe[1:]} (stage {stage.name}).{about}"


def make_command(command: Command, called: str) -> Callable[..., None]:
    """The typer command function of ``command`` (called ``called``, e.g. ``coa collect``)."""
    stage = _stages()[command.stage]
    names = command_names()
    params = parameters(stage, command, names)

    def run_stage(**values: Any) -> None:
        run_command(command, stage, called, values, names)

    run_stage.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run_stage.__annotations__ = {p.name: p.annotation for p in params}
    run_stage.__doc__ = _help(stage, command)
    run_stage.__name__ = command.stage.replace(".", "_").replace("-", "_")
    return run_stage


def _filled(given: Any, contract: str | tuple[str, ...]) -> TableInput | None:
    """The table of ``contract`` in the artifact of another input (its first such table), if any."""
    if not isinstance(given, TableInput):
        return None
    found = [t for t, info in given.ref.tables.items() if info.schema_id in accepted_contracts(contract)]
    return TableInput(given.ref, found[0]) if found else None


def read_given(
    command: Command, stage: Stage, called: str, values: dict[str, Any], names: Mapping[str, str]
) -> Given:
    """The command line, read: its inputs by contract (and those filled from another input's
    artifact), the profile's path and overrides, the command's own options."""
    roles = offered(stage, command)
    table = values.pop("table", None)
    inputs: dict[str, Any] = {}
    for role, contract in roles.items():
        value = values.pop(role)
        if value is None:
            continue
        how = (
            {}
            if contract is None
            else {"table": table if role == "tasks" else None, "prefer": command.prefer.get(role)}
        )
        inputs[role] = read_input(_flags(command, role)[0], value, contract, names, **how)
    for role, source in command.fill.items():
        contract = stage.expects.get(role)
        if role not in inputs and source in inputs and contract is not None:
            filled = _filled(inputs[source], contract)
            if filled is not None:
                inputs[role] = filled
    hints = {r: f"{_flags(command, r)[0]}: {_role_help(c, names)}" for r, c in roles.items()}
    config, overrides = values.pop("config", None), values.pop("overrides", None) or []
    return Given(called, stage, inputs, values, config, list(overrides), hints, runner=_run)


def run_command(
    command: Command, stage: Stage, called: str, values: dict[str, Any], names: Mapping[str, str]
) -> None:
    """Build the command's step with its stage's constructor, run it, print its URI and facts."""
    given = read_given(command, stage, called, dict(values), names)
    if command.section is not None:
        given.profile  # noqa: B018 - the profile loads (and its tracker is set) before any step is built
    step = command.make(given)
    if command.logs is not None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger(command.logs).setLevel(logging.INFO)
    result = _step(command, step, given.profile.execution if command.shards else None)
    if command.then is not None:
        after = command.then(given, result)
        if after is not None:
            step, result = after, _step(command, after)
    show(step, result)


def _step(command: Command, step: Step, execution: Any = None) -> StepResult:
    result: StepResult = _run(step, execution=execution)
    if command.said is not None:
        command.said(result)
    return result


def show(step: Step, result: StepResult) -> None:
    """The artifact's URI on a line of its own (``kind: URI``; a task set's bare URI, last) and what
    the step's stage presents."""
    from coa._cli.facts import show_step

    if step.kind == "tasks":
        show_step(step, result)
        typer.echo(result.ref.uri)
    else:
        typer.echo(f"{step.kind}: {result.ref.uri}")
        show_step(step, result)


def commands_under(group: str) -> list[str]:
    """The stage commands of a command group (``stage``: every stage; ``""``: the top-level kept
    names; ``tasks``, ``model``: theirs), named without reading the stage table."""
    if group == STAGE_GROUP:
        return list(COMMANDS)
    return [path.rpartition(" ")[2] for path, _ in ALIASES if path.rpartition(" ")[0] == group]


def build(group: str, name: str) -> Any:
    """The click command ``name`` of ``group`` (see :func:`commands_under`), generated now."""
    if group == STAGE_GROUP:
        command, called = COMMANDS[name], f"coa stage {name}"
    else:
        path = f"{group} {name}".strip()
        command, called = dict(ALIASES)[path], f"coa {path}"
    one = typer.Typer()
    one.command(name)(make_command(command, called))
    return typer.main.get_command(one)


class StageCommands(TyperGroup):
    """A command group whose stage commands are generated when called or listed, so that a command
    that runs no stage (``coa validate``) never loads the stage table; :func:`group` makes one."""

    group: typing.ClassVar[str] = ""
    first: typing.ClassVar[int] = 0
    """How many of the group's own commands its help lists before the stage commands."""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        made = [n for n in commands_under(self.group) if n not in own]
        return [*own[: self.first], *made, *own[self.first :]]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in commands_under(self.group):
            found = self.commands[cmd_name] = build(self.group, cmd_name)
        return found


class TopLevel(StageCommands):
    """The top level of ``coa``: today's names of the stage commands (``coa collect``…), listed after
    ``coa run``."""

    group = ""
    first = 1


def group(name: str, first: int = 0) -> type[StageCommands]:
    """The :class:`StageCommands` class of the command group ``name`` (``""``: the top level)."""
    return type(f"StageCommands_{name or 'coa'}", (StageCommands,), {"group": name, "first": first})


STAGE_GROUP = "stage"
STAGE_HELP = (
    "Run one stage: a command for every stage of the stage table (coa/plan/stages.py), generated from "
    "its declaration."
)
