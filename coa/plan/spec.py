"""A step as it crosses to another machine: a serialized, versioned spec, never a re-plan.

The flow that planned a step sends its :class:`StepSpec`: the step's name, its stage (by its name
in :data:`coa.plan.stages.STAGES`), its artifact kind and name, its frozen config as JSON and its
identity, its resolved inputs (artifact URIs with their content hashes, or an external model), the
code version, the content key and artifact URI the flow expects, and a digest of the config part of
the key.

The other side (:func:`accept`) rebuilds exactly that step from the same stage declaration (the
config validated back into the stage's config type), recomputes every part of the key and refuses a
spec it would build differently, naming the part: the spec version, the step's code version (the
code the stage's build can reach, :meth:`coa.steps.Stage.code_version`: a worker with another
docs or CLI edit accepts it), an input's content hash, the config, the storage root. A refused spec
never trains anything, so the flow never waits for an artifact that lands at another address.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from coa import io
from coa.config import canonical_json
from coa.errors import CheckFailed, InfraError
from coa.plan.stages import STAGES
from coa.settings import Settings
from coa.steps import ModelInput, Step, TableInput, key_config, upstream_refs

SPEC_VERSION = 1


class SpecRefused(CheckFailed):
    """The receiving side would build a different artifact than the spec's key names."""


class InputSpec(BaseModel):
    """One resolved input: a table or a model of a committed artifact, or an external model."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    uri: str | None = None
    """The committed artifact (None for an external model)."""
    content_hash: str | None = None
    """Its content hash when the spec was made (the key hashes it)."""
    table: str | None = None
    """The table the step reads (None: the input is a model)."""
    folder: str | None = None
    """The model's folder inside the artifact."""
    external: str | None = None
    """A model folder or hub id outside the store."""


class StepSpec(BaseModel):
    """Everything another machine needs to rebuild one step of a plan and check it is the same."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1] = 1
    name: str
    builder: str
    kind: str
    artifact: str
    config: Any
    identity: dict[str, Any]
    inputs: dict[str, InputSpec]
    code_version: str
    config_digest: str
    key: str
    uri: str


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]


def _input_spec(value: TableInput | ModelInput) -> InputSpec:
    if isinstance(value, TableInput):
        return InputSpec(uri=value.uri, content_hash=value.ref.content_hash, table=value.table)
    if value.ref is None:
        return InputSpec(external=value.external)
    return InputSpec(uri=value.ref.uri, content_hash=value.ref.content_hash, folder=value.folder)


def spec_of(step: Step, inputs: Mapping[str, TableInput | ModelInput], store: io.Store) -> StepSpec:
    """The spec of ``step`` with its resolved ``inputs`` (:func:`coa.steps.resolve`)."""
    if STAGES.get(step.builder) is not step.stage:
        raise CheckFailed(
            f"step {step.name}: its stage {step.builder!r} is not in the stage table: it cannot be dispatched"
        )
    material = key_config(step, inputs)
    version = step.stage.code_version()
    uri, key = store.address(step.kind, step.artifact, material, upstream_refs(inputs), version)
    return StepSpec(
        name=step.name,
        builder=step.builder,
        kind=step.kind,
        artifact=step.artifact,
        config=step.config_json(),
        identity=dict(step.identity),
        inputs={role: _input_spec(value) for role, value in sorted(inputs.items())},
        code_version=version,
        config_digest=_digest(material),
        key=key,
        uri=uri,
    )


def _open_input(role: str, spec: InputSpec, settings: Settings) -> TableInput | ModelInput:
    if spec.uri is None:
        return ModelInput(external=spec.external)
    ref = io.lookup(spec.uri, settings)
    if ref is None:
        raise InfraError(
            f"input {role!r}: no committed artifact at {spec.uri} here: the worker and the flow must share "
            "the store (COA_STORAGE_ROOT, S3 in production)"
        )
    if ref.content_hash != spec.content_hash:
        raise SpecRefused(
            f"input {role!r} differs: {spec.uri} has content hash {ref.content_hash} here, the spec was made "
            f"with {spec.content_hash}"
        )
    return (
        TableInput(ref, spec.table)
        if spec.table is not None
        else ModelInput(ref=ref, folder=spec.folder or "model")
    )


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (at most a few)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in sorted(set(expected) | set(actual), key=str):
            out += _differences(expected.get(k), actual.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if expected == actual else [path or "(whole value)"]


def rebuild(
    builder: str,
    name: str,
    artifact: str,
    config: Any,
    identity: Mapping[str, Any],
    inputs: Mapping[str, Any],
) -> Step:
    """The step a spec names (its stage ``builder``, name, artifact, config as JSON, identity and
    inputs), from the stage's declaration: no per-stage builder, no re-plan."""
    stage = STAGES[builder]
    return Step(
        name=name,
        stage=stage,
        artifact=artifact,
        config=stage.read_config(config),
        inputs=dict(inputs),
        identity=dict(identity),
        describe=stage.describe,
    )


def accept(
    spec: StepSpec | Mapping[str, Any], store: io.Store | None = None
) -> tuple[Step, dict[str, TableInput | ModelInput]]:
    """The step ``spec`` names and its inputs, rebuilt here; :class:`SpecRefused` (naming the part
    that differs) when this side would compute another key, :class:`InfraError` when an input or the
    expected address is not in this side's store."""
    store = store or io.Store()
    spec = spec if isinstance(spec, StepSpec) else StepSpec.model_validate(spec)
    stage = STAGES.get(spec.builder)
    if stage is None:
        raise SpecRefused(
            f"step {spec.name}: unknown stage {spec.builder!r} (known: {', '.join(sorted(STAGES))})"
        )
    here = stage.code_version()
    if spec.code_version != here:
        raise SpecRefused(
            f"step {spec.name}: code version differs: the spec was made with {spec.code_version}, "
            f"this worker runs {here}: deploy the same code to the flow's and the worker's machines"
        )
    inputs = {role: _open_input(role, value, store.settings) for role, value in spec.inputs.items()}
    try:
        step = rebuild(spec.builder, spec.name, spec.artifact, spec.config, spec.identity, inputs)
    except ValidationError as e:  # this side's config model does not take the spec's config
        where = ", ".join(".".join(str(p) for p in err["loc"]) for err in e.errors()[:5])
        raise SpecRefused(
            f"step {spec.name}: config differs ({where}): not a valid config here: {e.errors()[0]['msg']}"
        ) from None
    recomputed = dict(stage.identify(step.config)) if stage.identify is not None else {}
    changed = _differences(spec.config, step.config_json()) + [
        f"identity.{p}" for p in _differences(spec.identity, {**spec.identity, **recomputed})
    ]
    if (step.kind, step.artifact) != (spec.kind, spec.artifact):
        changed.append(f"artifact {step.kind}/{step.artifact} (spec: {spec.kind}/{spec.artifact})")
    material = key_config(step, inputs)
    if changed or _digest(material) != spec.config_digest:
        fields = f" ({', '.join(changed[:5])})" if changed else ""
        raise SpecRefused(
            f"step {spec.name}: config differs{fields}: it does not hash to the spec's config digest "
            f"{spec.config_digest} (this side: {_digest(material)})"
        )
    uri, key = store.address(step.kind, step.artifact, material, upstream_refs(inputs), here)
    if key != spec.key:
        raise SpecRefused(
            f"step {spec.name}: key differs: {key} here, {spec.key} in the spec "
            "(same config, inputs and code)"
        )
    if uri != spec.uri:
        raise InfraError(
            f"step {spec.name}: its artifact would land at {uri}, the flow expects {spec.uri}: "
            "the worker and the flow must share the store (COA_STORAGE_ROOT)"
        )
    return step, inputs
