"""What a stage command was given: its inputs read by contract, its options, the profile.

A stage command (:mod:`coa._cli.stages`) takes each input of its stage as an artifact URI (or, for a
model, a folder, hub id, model artifact or ``champion:NAME``) and reads from it the table its stage
expects by contract (:attr:`coa.steps.Stage.expects`): ``coa convert --curated URI`` reads the
curated artifact's ``trajectory.v1`` table, ``coa curate --raw URI`` a collection's
``trajectory.v1`` or an RL model's ``rollout.v1`` table, without naming them. A wrong artifact is one
line naming the commands that make the right one (the stages that produce the contract,
:func:`made_by`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coa import io
from coa._cli.common import _KIND_NAMES, _MADE_FROM, _config, _model
from coa.errors import UserError
from coa.inputs import ModelInput, TableInput, accepted_contracts
from coa.steps import Stage, Step, StepResult


def made_by(contracts: tuple[str, ...], names: Mapping[str, str]) -> str:
    """The commands whose stages write a table of one of ``contracts`` (``model``: the stages that
    write models), as a user types them; ``names``: stage → its command."""
    from coa.plan.stages import STAGES

    found = [
        f"`{names[s.name]}`"
        for s in STAGES.values()
        if (set(s.produces.values()) & set(contracts)) or ("model" in contracts and s.kind == "model")
    ]
    return " | ".join(dict.fromkeys(found)) or "no stage"


def _table_names(contracts: tuple[str, ...]) -> list[str]:
    """The names the stages give their tables of ``contracts`` (``sft`` for ``sft.v1``)."""
    from coa.plan.stages import STAGES

    found = (t for s in STAGES.values() for t, c in s.produces.items() if c in contracts)
    return list(dict.fromkeys(found))


def read_table(
    option: str,
    uri: str,
    expected: str | tuple[str, ...],
    names: Mapping[str, str],
    table: str | None = None,
    prefer: str | None = None,
) -> TableInput:
    """The table of the artifact at ``uri`` that ``option`` reads: ``table`` when given, else its table
    of the ``expected`` contract (``prefer`` when it has that one, else its first such table)."""
    contracts = accepted_contracts(expected)
    try:
        ref = io.open_artifact(uri)
    except io.ArtifactError as e:
        raise UserError(f"{option} {uri}: {e} (it is produced by {made_by(contracts, names)})") from None
    tables = ", ".join(ref.tables)
    if table is not None:
        if table not in ref.tables:
            raise UserError(f"{ref.uri} has no table {table!r}; its tables: {tables} (use --table)")
        return TableInput(ref, table)  # the runner checks its contract (coa.steps.check_inputs)
    matching = [t for t, info in ref.tables.items() if info.schema_id in contracts]
    if not matching:
        wanted = _table_names(contracts)
        what = repr(wanted[0]) if len(wanted) == 1 else " or ".join(contracts)
        given = _KIND_NAMES.get(ref.kind, ref.kind)
        then = _MADE_FROM[ref.kind][1].format(uri=ref.uri) if ref.kind in _MADE_FROM else ""
        raise UserError(
            f"{option} {ref.uri} is a {given} artifact (tables: {tables}), not one with a {what} table: "
            f"give the artifact {made_by(contracts, names)} makes{then}"
        )
    if prefer in matching:
        return TableInput(ref, prefer)
    return TableInput(ref, ref.primary_table if ref.primary_table in matching else matching[0])


@dataclasses.dataclass
class Given:
    """A stage command's arguments, read: what its maker (:data:`coa._cli.commands.COMMANDS`) builds
    the stage's step from."""

    command: str
    """How the user called it (``coa collect``), for errors."""
    stage: Stage
    inputs: dict[str, TableInput | ModelInput]
    """Input role → what the command line gave for it (roles not given are absent)."""
    options: dict[str, Any]
    """The command's own options (not inputs, not the profile) by name."""
    config_path: Path | None = None
    overrides: list[str] = dataclasses.field(default_factory=list)
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Input role → the option and what it takes, for the error when a needed one is missing."""
    runner: Callable[[Step], StepResult] | None = None
    _profile: Any = None

    @property
    def profile(self) -> Any:
        """The pipeline profile (``--config``) with the overrides, loaded once."""
        if self._profile is None:
            if self.config_path is None:
                raise UserError(f"{self.command} reads no profile")
            self._profile = _config(self.config_path, self.overrides)
        return self._profile

    def section(self, name: str) -> Any:
        """The profile's ``name`` section; a profile without it is refused, saying so."""
        value = getattr(self.profile, name)
        if value is None:
            raise UserError(
                f"{self.config_path} has no {name} section: add one or pick a profile that has it"
            )
        return value

    def input(self, role: str) -> Any:
        """The input ``role``, which the step needs: a missing one is refused, saying which option."""
        if role not in self.inputs:
            raise UserError(f"{self.command} needs {self.hints.get(role, role)}")
        return self.inputs[role]

    def optional(self, role: str) -> Any:
        """The input ``role`` when given, else None."""
        return self.inputs.get(role)

    def run(self, step: Step) -> StepResult:
        """Run a step the command's step needs first (SFT's tiny student), with the progress bar."""
        assert self.runner is not None
        return self.runner(step)


def read_input(
    option: str, value: str, expected: str | tuple[str, ...] | None, names: Mapping[str, str], **how: Any
) -> TableInput | ModelInput:
    """One input as given on the command line: a model (``expected`` None) or a table by contract."""
    if expected is None:
        return _model(value, option)
    return read_table(option, value, expected, names, **how)
