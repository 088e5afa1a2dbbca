"""What a step reads: a table of a committed artifact, a model, or the output of an earlier step.

Re-exported by :mod:`coa.steps` (the runner), where every stage imports them from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from coa import io
from coa.io import ArtifactRef


@dataclasses.dataclass(frozen=True)
class TableInput:
    """One table of a committed artifact: what a step reads (never a loose ``(ref, table)`` pair)."""

    ref: ArtifactRef
    table: str

    @property
    def uri(self) -> str:
        return self.ref.uri

    def read(self, columns: Sequence[str] | None = None) -> Any:
        """The whole table (through its contract)."""
        return io.read_table(self.ref, self.table, columns=columns)

    def rows(self) -> int:
        return self.ref.rows(self.table)


@dataclasses.dataclass(frozen=True)
class Upstream:
    """A reference, inside a plan, to the output of an earlier step (resolved when it has run).

    A plan makes it from the producing step (:meth:`coa.steps.Step.output`), never from a name; the
    name it holds is the step's, which is how the runner finds the step's result and a step spec names
    the step on the wire."""

    step: str
    table: str | None = None


@dataclasses.dataclass(frozen=True)
class ModelInput:
    """A model a step starts from: a committed model artifact, or an external folder / hub id.

    A worker materialises its own local copy of an artifact (:meth:`local_path`), so the reference
    stays valid on any machine that reaches the store.
    """

    ref: ArtifactRef | None = None
    external: str | None = None
    folder: str = "model"

    def __post_init__(self) -> None:
        if (self.ref is None) == (self.external is None):
            raise ValueError(
                "ModelInput needs exactly one of ref (an artifact) or external (a folder/hub id)"
            )

    @property
    def name(self) -> str:
        return self.ref.uri if self.ref is not None else str(self.external)

    def local_path(self) -> str:
        if self.ref is None:
            return str(self.external)
        return str(io.local_folder(self.ref, self.folder))

    @classmethod
    def parse(cls, value: str) -> ModelInput:
        """A model given by name: a committed model artifact URI, else a folder/hub id (a registry
        name such as ``champion:NAME`` is resolved by the caller first: the CLI, a plan)."""
        ref = io.lookup(value)
        return cls(ref=ref) if ref is not None else cls(external=value)


StepInput = TableInput | ModelInput | Upstream
"""What a step names as an input: a committed table, a model, or an earlier step's output."""


def accepted_contracts(expected: str | tuple[str, ...]) -> tuple[str, ...]:
    """The contracts an ``expects`` entry accepts."""
    return (expected,) if isinstance(expected, str) else tuple(expected)


def lineage_inputs(inputs: Mapping[str, TableInput | ModelInput]) -> dict[str, Any]:
    """What the lineage records of each input: its artifact and table, or the model."""
    out: dict[str, Any] = {}
    for role, value in inputs.items():
        if isinstance(value, TableInput):
            out[role] = {"uri": value.uri, "table": value.table}
        else:
            out[role] = {"uri": value.ref.uri if value.ref else None, "model": value.name}
    return out
