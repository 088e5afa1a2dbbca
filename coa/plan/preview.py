"""Views of a plan before it runs: ``coa run --dry-run``'s table and ``--only``'s slice.

:func:`preview` gives each step its content key and what a run would do with it (reuse, build, a
damaged artifact, the last failed attempt and the checkpoint it resumes from); :func:`select` the
steps ``--only`` runs and those in front of them it only reuses.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from coa import io
from coa.attempts import last_failure, resumes
from coa.config import canonical_json
from coa.errors import UserError
from coa.steps import ModelInput, Step, StepResult, TableInput, Upstream, address, key_config, resolve


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
            status = "build" + why_rebuilt(step, inputs, store)
            failed = last_failure(store, uri)
            if failed is not None:
                reason = (failed.get("message") or failed.get("error") or "unknown")[:80]
                status = f"build (last attempt failed: {reason}{resumes(store, uri)})"
        out.append(PlannedStep(step.name, step.kind, key, status, uri))
    return out


def _last_built(step: Step, store: io.Store) -> dict[str, Any] | None:
    """The lineage of the newest committed artifact of this step (same kind, artifact name, step)."""
    fs, root = io.filesystem(io.join(store.root, step.kind), store.settings)
    if not fs.exists(root):
        return None
    best: dict[str, Any] | None = None
    for folder in fs.ls(root, detail=False):
        if not posixpath.basename(folder).startswith(f"{step.artifact}-"):
            continue
        ref = io.lookup(io.join(store.root, step.kind, posixpath.basename(folder)), store.settings)
        if ref is None:
            continue
        lineage = io.read_lineage(ref, store.settings)
        if lineage.get("step") == step.name and (best is None or lineage["created_at"] > best["created_at"]):
            best = lineage
    return best


def _changed_files(before: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    return sorted(f for f in set(before) | set(now) if before.get(f) != now.get(f))


def why_rebuilt(step: Step, inputs: Mapping[str, TableInput | ModelInput], store: io.Store) -> str:
    """Why a step with no artifact at its key will be built, against the last artifact of the same
    step: `` (code changed: coa/train/sft.py)``, `` (config changed)``, `` (inputs changed)``; empty
    when it was never built (or its lineage predates per-step code versions)."""
    last = _last_built(step, store)
    if last is None:
        return ""
    reasons = []
    code = last.get("step_code") or {}
    if code.get("version") and code["version"] != step.stage.code_version():
        files = _changed_files(code.get("files", {}), step.stage.code_files())
        shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        reasons.append(f"code changed: {shown}" if files else f"stage version {code['version']}")
    material = json.loads(canonical_json(key_config(step, inputs)))
    if last.get("config") != material:
        reasons.append("config changed")
    hashes = sorted(v.ref.content_hash for v in inputs.values() if v.ref is not None)
    if sorted({u["content_hash"] for u in last.get("upstream", [])}) != sorted(set(hashes)):
        reasons.append("inputs changed")
    return f" ({'; '.join(reasons)})" if reasons else ""


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
