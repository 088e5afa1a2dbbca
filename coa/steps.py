"""Steps and the one runner that builds them (marin's executor steps are the model).

A :class:`Step` is a name, a frozen config, named typed inputs and a build function. The runner
(:func:`run_step`) alone owns what every stage shares:

* the **content key**: a hash of the step's kind and artifact name, its config, its ``identity``
  (input files' hashes, an external model id…), the content hashes of its input artifacts and the
  code version: :func:`address`;
* **reuse**: a committed artifact at that key is returned as it is, never rebuilt;
* the **commit**: the build function writes into an :class:`~coa.io.ArtifactWriter`; the runner
  commits it (manifest last) or, on an exception, removes what was staged and leaves a failure
  marker (:mod:`coa.attempts`: the error, when; outside the artifact folder) that ``coa run
  --dry-run`` shows, with the checkpoint a rebuild resumes from;
* **one build per address**: an identical run started meanwhile waits on the address's lock
  (:meth:`~coa.io.ArtifactWriter.claim`), then reuses the artifact the first one committed;
* **integrity on reuse**: a reused artifact is checked against its manifest first (a damaged one is
  moved aside, an error names the file, the next run rebuilds it); a full disk is one
  :class:`~coa.io.StorageFull` line (exit 3) and commits nothing;
* **lineage**: the step name, its inputs (by role and table), where it was built (host, process id)
  and its summary go into ``_lineage.json``;
* **what a front end adds to the artifact** (``finish``: the viewer's page of its episodes,
  :func:`coa.view.commit.commit_page`): staged after the build, committed with it, outside the key;
  a failure there is logged and the artifact is committed without it;
* **checks that fail after the evidence is written** (the curation gate): the build calls
  :meth:`Build.fail`; the artifact is committed (so the report can be read) and the runner raises
  :class:`StepCheckFailed` with the recorded message, the same on every rerun.

The CLI, the Prefect tasks and the tests all build steps with each stage's ``step()`` function and
run them here, so the same inputs give the same artifact whichever way a run is started.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from coa import io, tracking
from coa.attempts import clear_failed, mark_failed
from coa.errors import CheckFailed, CoaError, UserError
from coa.execution import ShardExecutor
from coa.facts import Facts, Table, show
from coa.inputs import ModelInput, StepInput, TableInput, Upstream, accepted_contracts, lineage_inputs
from coa.io import ArtifactRef
from coa.progress import Progress
from coa.resources import BuildResources, measure, release_free_memory
from coa.summary import StepSummary
from coa.version import files_version, step_files

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Build:
    """What a build function gets: the writer, its resolved inputs, and where to report."""

    step: Step
    writer: io.ArtifactWriter
    inputs: dict[str, TableInput | ModelInput]
    store: io.Store
    progress: Progress | None = None
    typed: StepSummary | None = None
    """The step's summary (:meth:`report`); None = the step reports nothing."""
    failure: str | None = None
    cleanup: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    """Run after the commit (e.g. removing checkpoints the artifact now supersedes)."""
    executor: ShardExecutor | None = None
    """Where the step's shards run (:mod:`coa.execution`); None = all in this process. Never part of
    the content key: a sharded build must commit the same artifact as the one-process build."""

    def table(self, role: str) -> TableInput:
        value = self.inputs[role]
        if not isinstance(value, TableInput):
            raise TypeError(f"input {role!r} of step {self.step.name} is a model, not a table")
        return value

    def model(self, role: str) -> ModelInput:
        value = self.inputs[role]
        if not isinstance(value, ModelInput):
            raise TypeError(f"input {role!r} of step {self.step.name} is a table, not a model")
        return value

    def optional(self, role: str) -> TableInput | ModelInput | None:
        return self.inputs.get(role)

    def fail(self, message: str) -> None:
        """Record a failed check: the artifact is still committed, then the runner raises."""
        self.failure = message

    def report(self, summary: StepSummary) -> None:
        """Set the step's summary (the runner stores it in lineage and returns it)."""
        self.typed = summary

    def summary_json(self) -> dict[str, Any]:
        """The summary as the runner stores it (empty when the step reported none)."""
        return {} if self.typed is None else self.typed.to_dict()


BuildFn = Callable[[Build], None]
Finish = Callable[[io.ArtifactWriter], object]
"""What the runner adds to a built artifact before its commit, outside its key (the entry layers pass
:func:`coa.view.commit.commit_page`: the page of the episodes it holds)."""
Present = Callable[[Any, "StepResult"], Facts]
"""A stage's view of a step: its typed summary and result → plain facts (:mod:`coa.facts`). Each
stage's lives in its ``present`` module, which its build never imports (so what a stage shows is
outside its key); :data:`coa.plan.stages.PRESENTERS` names them."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage, declared once as data (marin's ``ExecutorStep(name, fn, config)`` is the model).

    Each stage module declares its ``STAGE``; :data:`coa.plan.stages.STAGES` lists them all, and every
    entry layer reads that one table: the plans, a step spec's rebuild on another machine, the Prefect
    layer's one publisher and the CLI (what a step shows: :func:`coa.plan.stages.facts`), ``coa run``'s
    result.
    """

    name: str
    """The stage's name in the table (``sft``, ``collect.retry``): what a step spec names."""
    kind: str
    """The artifact folder its steps write (``model``, ``curated``…)."""
    build: BuildFn
    """A plain function of the :class:`Build` (never a closure: options travel in ``Step.options``)."""
    config: type[BaseModel] | None = None
    """The frozen config model (None: a plain JSON config)."""
    expects: Mapping[str, str | tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Input role → the data contract(s) its table must have; a role may be an ``fnmatch`` pattern
    (``after_r*``); roles a step does not have are not checked."""
    produces: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Table → the data contract it is written under."""
    summary: type[StepSummary] | None = None
    """What its build reports (:meth:`Build.report`)."""
    describe: str = ""
    identify: Callable[[Any], Mapping[str, Any]] | None = None
    """The parts of a step's identity this side recomputes from its config (the files an import
    hashes): a step spec whose identity differs there is refused."""
    version: int = 1
    """Bumped by hand to rebuild every artifact of the stage (keys hash it with its code)."""
    runs_model: bool = False
    """Whether its steps run the student (build, train, sample or evaluate it): a GPU machine's work;
    the other stages' steps run on any CPU (``infra/run_plan.py --cpu-steps``)."""

    def step(
        self, config: Any, inputs: Mapping[str, StepInput | None] | None = None, *, name: str | None = None,
        artifact: str | None = None, identity: Mapping[str, Any] | None = None, describe: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Step:  # fmt: skip
        """A step of this stage (its one constructor), named and described as the stage by default."""
        artifact = config.name if artifact is None else artifact
        return Step(name or self.name, self, artifact, config, dict(inputs or {}), dict(identity or {}),
                    self.describe if describe is None else describe, dict(options or {}))  # fmt: skip

    def expects_for(self, roles: Iterable[str]) -> dict[str, str | tuple[str, ...]]:
        """The contract each of ``roles`` must have (roles without one are left out)."""
        out: dict[str, str | tuple[str, ...]] = {}
        for role in roles:
            for pattern, contract in self.expects.items():
                if role == pattern or fnmatch.fnmatchcase(role, pattern):
                    out[role] = contract
                    break
        return out

    def read_config(self, value: Any) -> Any:
        """A config as a step spec carries it (JSON), back into the stage's model."""
        return self.config.model_validate(value) if self.config is not None else value

    def summary_facts(self, result: StepResult) -> Facts:
        """The summary's figures as one table (none when it reported none): what a front end shows of
        a step whose stage presents nothing (:data:`coa.plan.stages.PRESENTERS`), in the summary
        type's field order, so a fresh result and one read back from lineage (stored with sorted
        keys) show the same table."""
        declared = [k for k in (self.summary.model_fields if self.summary else ()) if k in result.summary]
        keys = [*declared, *sorted(k for k in result.summary if k not in declared)]
        rows = [
            {"metric": k, "value": show(result.summary[k])}
            for k in keys
            if not isinstance(result.summary[k], dict | list)
        ]
        return Facts((Table("summary", rows, f"{self.describe}: {result.ref.uri}"),) if rows else ())

    def contracts(self) -> tuple[str, ...]:
        """The data contracts its steps read or write (what :meth:`code_files` hashes of ``schemas``)."""
        read = {c for v in self.expects.values() for c in accepted_contracts(v)}
        return tuple(sorted(read | set(self.produces.values())))

    def code_files(self) -> dict[str, str]:
        """The source files a step of this stage depends on (path → digest): the import closure of
        its build function's module within ``coa``, and its contracts' modules."""
        return step_files(self.build.__module__, self.contracts())

    def code_version(self) -> str:
        """The version of the code a step of this stage runs: its explicit :attr:`version` and the
        files it depends on (:meth:`code_files`), not the whole tree: a docs or CLI edit keeps it."""
        return f"{self.name}.v{self.version}+src.{files_version(self.code_files())}"


@dataclasses.dataclass(frozen=True)
class Step:
    """A stage instance: a :class:`Stage`, a name, a frozen config, named inputs.

    ``artifact`` is the artifact's name inside the stage's ``kind`` folder (the config's ``name``);
    ``identity`` holds whatever else decides the content; ``options`` what the build gets that does
    not (transformers callbacks): never part of the key, never sent in a step spec.
    """

    name: str
    stage: Stage
    artifact: str
    config: Any
    inputs: Mapping[str, StepInput | None] = dataclasses.field(default_factory=dict)
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    describe: str = ""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.stage.kind

    @property
    def builder(self) -> str:
        """The stage's name in the stage table (what a step spec names)."""
        return self.stage.name

    @property
    def expects(self) -> dict[str, str | tuple[str, ...]]:
        """Input role → the data contract(s) its table must have."""
        return self.stage.expects_for(role for role, v in self.inputs.items() if v is not None)

    @property
    def produces(self) -> Mapping[str, str]:
        """Table → the data contract it is written under."""
        return self.stage.produces

    def config_json(self) -> Any:
        if isinstance(self.config, BaseModel):
            return self.config.model_dump(mode="json")
        return self.config

    def with_inputs(self, inputs: Mapping[str, StepInput | None]) -> Step:
        return dataclasses.replace(self, inputs=dict(inputs))

    def output(self, table: str | None = None) -> Upstream:
        """This step's model (no ``table``) or one of its tables, as a later step of its plan reads it."""
        if table is not None and table not in self.produces:
            tables = ", ".join(self.produces)
            raise ValueError(f"step {self.name} writes no table {table!r}; its tables: {tables}")
        return Upstream(self.name, table)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """The outcome of running a step: its committed artifact, whether it was reused, its summary."""

    step: str
    ref: ArtifactRef
    reused: bool
    summary: Mapping[str, Any]
    resources: BuildResources | None = None
    """Wall time and peak memory of the build (None when the artifact was reused)."""


class StepCheckFailed(CheckFailed):
    """A step's check failed after its evidence was committed (e.g. the curation gate)."""

    def __init__(self, step: str, uri: str, message: str) -> None:
        super().__init__(f"{message} (artifact {uri})")
        self.step, self.uri, self.message = step, uri, message


# -- identity ---------------------------------------------------------------------------------------


def key_config(step: Step, inputs: Mapping[str, TableInput | ModelInput]) -> dict[str, Any]:
    """Everything but the upstream content hashes that decides the content (they go in separately)."""
    roles: dict[str, Any] = {}
    for role, value in sorted(inputs.items()):
        if isinstance(value, TableInput):
            roles[role] = {"table": value.table}
        elif value.ref is None:
            roles[role] = {"model": value.external}
        else:
            roles[role] = {"model_folder": value.folder}
    return {"config": step.config_json(), "identity": dict(step.identity), "inputs": roles}


def upstream_refs(inputs: Mapping[str, TableInput | ModelInput]) -> list[ArtifactRef]:
    """The committed artifacts the step reads (each once): their content hashes go into the key."""
    refs: list[ArtifactRef] = []
    for value in inputs.values():
        ref = value.ref
        if ref is not None and ref.uri not in {r.uri for r in refs}:
            refs.append(ref)
    return refs


def resolve(step: Step, done: Mapping[str, StepResult]) -> dict[str, TableInput | ModelInput]:
    """The step's inputs with every :class:`Upstream` replaced by the committed output it names."""
    out: dict[str, TableInput | ModelInput] = {}
    for role, value in step.inputs.items():
        if value is None:
            continue
        if isinstance(value, Upstream):
            if value.step not in done:
                raise UserError(f"step {step.name} needs {value.step!r}, which has not run in this plan")
            ref = done[value.step].ref
            if ref.kind == "model" and value.table is None:
                out[role] = ModelInput(ref=ref)
            else:
                out[role] = TableInput(ref, value.table or ref.primary_table)
        else:
            out[role] = value
    return out


def address(step: Step, inputs: Mapping[str, TableInput | ModelInput], store: io.Store) -> tuple[str, str]:
    """The content-addressed URI of the step's artifact, and its key."""
    version = step.stage.code_version()
    return store.address(step.kind, step.artifact, key_config(step, inputs), upstream_refs(inputs), version)


# -- running ----------------------------------------------------------------------------------------


def run_step(
    step: Step,
    store: io.Store | None = None,
    done: Mapping[str, StepResult] | None = None,
    progress: Progress | None = None,
    reuse_only: bool = False,
    executor: ShardExecutor | None = None,
    finish: Finish | None = None,
) -> StepResult:
    """Reuse the step's committed artifact, or build and commit it (see the module docstring).

    ``reuse_only``: never build; a step that has no committed artifact is a :class:`UserError`
    (``coa run --only`` uses it for the steps in front of the slice it runs). ``executor``: where a
    step that shards its work runs the shards (``execution.engine``); it does not change the key.
    ``finish``: what to add to a built artifact before its commit (:data:`Finish`).

    A request the storage service still fails after the client's retries (S3: HTTP 5xx, throttling)
    is one :class:`~coa.io.StorageUnavailable` line (exit 3) naming the step; nothing is committed.
    """
    store = store or io.Store()
    try:
        return _run_step(step, store, done, progress, reuse_only, executor, finish)
    except CoaError:
        raise
    except Exception as e:
        said = io.storage_failure(e)
        if said is None:
            raise
        raise io.StorageUnavailable(
            f"step {step.name}: the store {store.root} failed a request ({said}): nothing new was "
            "committed; check the storage service (COA_S3_ENDPOINT_URL, credentials, the bucket) and "
            "rerun: it resumes"
        ) from e


def _run_step(
    step: Step,
    store: io.Store,
    done: Mapping[str, StepResult] | None,
    progress: Progress | None,
    reuse_only: bool,
    executor: ShardExecutor | None,
    finish: Finish | None = None,
) -> StepResult:
    inputs = resolve(step, done or {})
    check_inputs(step, inputs)
    upstream = upstream_refs(inputs)
    writer = store.writer(
        step.kind,
        step.artifact,
        key_config(step, inputs),
        upstream=upstream,
        extra_lineage={
            "step": step.name,
            "inputs": lineage_inputs(inputs),
            "built_by": _built_by(),
            "step_code": {
                "version": step.stage.code_version(),
                "files": step.stage.code_files(),
            },
        },
        version=step.stage.code_version(),
    )
    existing = writer.existing()  # checked against its manifest: a damaged one is moved aside, raises
    if existing is None and reuse_only:
        raise UserError(
            f"step {step.name} has no committed artifact at {writer.uri}: run it first "
            f"(`coa run --only {step.name.split('.')[0]}`, or without --only)"
        )
    if existing is None:
        with writer.claim():  # an identical run building it now: wait for it, then reuse its artifact
            existing = writer.existing()
            if existing is None:
                return _build_and_commit(step, writer, inputs, store, progress, executor, finish)
    record = io.read_lineage(existing).get("result", {})
    if record.get("failure"):
        raise StepCheckFailed(step.name, existing.uri, record["failure"])
    return StepResult(step.name, existing, True, record.get("summary", {}))


def _build_and_commit(
    step: Step,
    writer: io.ArtifactWriter,
    inputs: dict[str, TableInput | ModelInput],
    store: io.Store,
    progress: Progress | None,
    executor: ShardExecutor | None,
    finish: Finish | None = None,
) -> StepResult:
    build = Build(step, writer, inputs, store, progress, executor=executor)
    try:
        upstream = [u.uri for u in writer.upstream]
        with tracking.step_run(step.name, writer.uri, upstream, store.root) as tracker:
            with measure() as meter:
                step.stage.build(build)
            release_free_memory()  # the next step starts from what this one holds, not its high-water mark
            summary = build.summary_json()
            if tracker is not None:  # the lineage names the tracker run; the run gets the summary
                writer.extra_lineage["tracker"] = tracker.lineage()
                tracking.log_summary(tracker, summary)
    except BaseException as e:
        writer.abort()  # inside the runner's claim: the lock is kept until the marker is written
        mark_failed(writer, step.name, e)
        if io.is_disk_full(e):
            raise io.StorageFull(
                f"no space left on the device while building step {step.name} ({writer.uri}): nothing "
                f"was committed; free space under {store.root} and rerun (it resumes)"
            ) from e
        raise
    written = {name: info["schema_id"] for name, info in writer.tables.items()}
    missing = {t: c for t, c in step.produces.items() if written.get(t) != c}
    if missing:
        writer.abort()
        raise RuntimeError(f"step {step.name} did not write {missing} (wrote {written}): a bug in its build")
    if finish is not None:
        try:
            finish(writer)
        except Exception as e:  # a view of the artifact, not the artifact: commit without it
            log.warning("step %s: %s failed (%s: %s); committed without it", step.name,
                        getattr(finish, "__name__", "finish"), type(e).__name__, e)  # fmt: skip
    writer.extra_lineage["result"] = {"summary": summary, "failure": build.failure}
    resources = meter.result
    if resources is not None:
        writer.extra_lineage["resources"] = resources.to_json()
    try:
        ref = writer.commit()
    except BaseException as e:
        writer.abort()
        mark_failed(writer, step.name, e)  # still under the claim's lock, as a failed build
        if io.is_disk_full(e):
            raise io.StorageFull(
                f"no space left on the device while committing step {step.name} ({writer.uri}): nothing "
                f"was committed; free space under {store.root} and rerun"
            ) from e
        raise
    clear_failed(writer)
    for done_with in build.cleanup:
        done_with()
    if build.failure:
        raise StepCheckFailed(step.name, ref.uri, build.failure)
    return StepResult(step.name, ref, False, summary, resources)


def check_inputs(step: Step, inputs: Mapping[str, TableInput | ModelInput]) -> None:
    """Every input table has the contract the step expects (a wrong artifact is a clear user error)."""
    for role, expected in step.expects.items():
        value = inputs.get(role)
        if value is None:
            continue
        accepted = accepted_contracts(expected)
        contract = " or ".join(accepted)
        if isinstance(value, ModelInput):
            raise UserError(
                f"{step.name}: input {role!r} must be a {contract} table, got a model ({value.name})"
            )
        info = value.ref.tables.get(value.table)
        if info is None:
            tables = ", ".join(value.ref.tables)
            raise UserError(f"{step.name}: {value.uri} has no table {value.table!r}; its tables: {tables}")
        if info.schema_id not in accepted:
            raise UserError(
                f"{step.name}: input {role!r} must be a {contract} table, but {value.uri} [{value.table}] "
                f"is {info.schema_id}"
            )


def _built_by() -> dict[str, Any]:
    """Where the step is built (host and process id): a dispatched step's lineage names its worker."""
    return {"host": socket.gethostname(), "pid": os.getpid()}
