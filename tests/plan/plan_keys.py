"""The content keys a plan's steps get, computed without running anything (for the key tests).

Each step's upstream artifacts are stood in for by references whose content hash is the upstream
step's own key, so a key depends on the config, the identity, the inputs and the code version of
every step before it, as it does in a real run (where the content hash follows from the same).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

from coa import io
from coa.io import ArtifactRef, TableInfo
from coa.steps import Step, StepResult, Upstream, address, resolve


def _tables(step: Step, steps: Sequence[Step]) -> dict[str, TableInfo]:
    wanted = dict.fromkeys(step.produces)
    for other in steps:
        for value in other.inputs.values():
            if isinstance(value, Upstream) and value.step == step.name and value.table:
                wanted.setdefault(value.table)
    return {t: TableInfo(schema_id=step.produces.get(t, "unknown"), rows=1, files=()) for t in wanted}


@contextmanager
def pinned(version: str) -> Iterator[None]:
    """Every key computed inside uses ``version`` as the code version."""
    with (
        mock.patch("coa.io.writer.code_version", lambda: version),
        mock.patch("coa.steps.Stage.code_version", lambda self: version),
    ):
        yield


def planned_keys(steps: Sequence[Step], store: io.Store) -> dict[str, str]:
    """Step name → the key the runner would give it (upstream content hashes stood in for)."""
    done: dict[str, StepResult] = {}
    out: dict[str, str] = {}
    for step in steps:
        inputs = resolve(step, done)
        uri, key = address(step, inputs, store)
        tables = _tables(step, steps)
        ref = ArtifactRef(
            uri=uri, kind=step.kind, name=step.artifact, key=key, content_hash=f"content-of-{key}",
            tables=tables, primary=next(iter(tables), None),
        )  # fmt: skip
        done[step.name] = StepResult(step.name, ref, False, {})
        out[step.name] = key
    return out
