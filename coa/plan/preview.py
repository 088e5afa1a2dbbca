"""Views of a plan before it runs: ``coa run --dry-run``'s table and ``--only``'s slice.

:func:`preview` gives each step its content key and what a run would do with it (reuse, build, a
damaged artifact, the last failed attempt and the checkpoint it resumes from); :func:`select` the
steps ``--only`` runs and those in front of them it only reuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from coa import io
from coa.attempts import last_failure, resumes
from coa.errors import UserError
from coa.steps import Step, StepResult, Upstream, address, resolve


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """What ``coa run --dry-run`` prints for a step."""

    name: str
    kind: str
    key: str | None
    status: str
    uri: str | None


def preview(steps: Sequence[Step], store: io.Store | None = None) -> list[PlannedStep]:
    """For each step: its key and whether a committed artifact will be reused.

    A step whose inputs are not all committed yet cannot have a key (it hashes their contents): it
    will be built.
    """
    store = store or io.Store()
    done: dict[str, StepResult] = {}
    out = []
    for step in steps:
        try:
            inputs = resolve(step, done)
        except UserError:
            out.append(PlannedStep(step.name, step.kind, None, "build (after its inputs)", None))
            continue
        uri, key = address(step, inputs, store)
        ref = io.lookup(uri, store.settings)
        damaged = io.size_mismatch(ref, store.settings) if ref is not None else None
        if ref is not None and damaged:
            status = f"damaged ({damaged} differs from its manifest): the run stops on it, the next rebuilds"
            out.append(PlannedStep(step.name, step.kind, key, status, uri))
            continue
        if ref is not None:
            record = io.read_lineage(ref).get("result", {})
            status = "reuse (check failed: " + record["failure"] + ")" if record.get("failure") else "reuse"
            done[step.name] = StepResult(step.name, ref, True, record.get("summary", {}))
        else:
            status = "build"
            failed = last_failure(store, uri)
            if failed is not None:
                reason = (failed.get("message") or failed.get("error") or "unknown")[:80]
                status = f"build (last attempt failed: {reason}{resumes(store, uri)})"
        out.append(PlannedStep(step.name, step.kind, key, status, uri))
    return out


def select(steps: Sequence[Step], only: Sequence[str] | None) -> list[tuple[Step, bool]]:
    """``(step, run_it)`` for the steps named in ``only`` and those they read.

    A stage name selects its sub-steps (``evaluate`` covers ``evaluate.after``). The steps in front
    that the selection reads come with ``run_it=False``: they are only reused, never built, so
    ``--only`` runs exactly the slice asked for.
    """
    if not only:
        return [(s, True) for s in steps]
    names = {s.name for s in steps}
    wanted = {s.name for s in steps if any(s.name == o or s.name.startswith(o + ".") for o in only)}
    unknown = [o for o in only if not any(n == o or n.startswith(o + ".") for n in names)]
    if unknown:
        raise UserError(
            f"--only {','.join(unknown)}: no such stage in the plan ({', '.join(s.name for s in steps)})"
        )
    by_name = {s.name: s for s in steps}
    needed: set[str] = set()

    def need(name: str) -> None:
        if name in needed:
            return
        needed.add(name)
        for value in by_name[name].inputs.values():
            if isinstance(value, Upstream):
                need(value.step)

    for name in wanted:
        need(name)
    return [(s, s.name in wanted) for s in steps if s.name in needed]
