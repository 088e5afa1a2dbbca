"""Nightly retraining as a plan of steps, and the ledger of nights.

A night (a date, or any label) runs :func:`nightly_plan`:

1. the configured task source (synthetic families and/or imported task sets);
2. ``nightly.new_tasks``: only the tasks whose ids no earlier night collected (the earlier nights'
   collections are inputs of this step, so its key and lineage name them);
3. ``collect`` on the new tasks (budgeted and cached by the collect stage);
4. ``nightly.merge``: tonight's runs and tasks together with the earlier nights' ones (one
   ``trajectories`` and one ``tasks`` table; a run id seen twice is kept once);
5. ``curate`` (its dedup and decontamination then work across nights), ``convert``;
6. ``sft`` from the configured base or from the champion (``promotion.sft_from``); with
   ``rounds: N``, the self-improvement rounds after it (``sample.r1`` on the merged tasks,
   ``curate.r2`` of the merged runs beside the student's correct samples, ``convert.r2``,
   ``sft.r2``…; :func:`coa.plan.choices.later_rounds`), the last round's model going on;
7. ``rl`` on tonight's RL prompts from the SFT model, when the config has an ``rl`` section (with
   ``rl.families: auto``, ``evaluate.sft`` first evaluates the SFT model on the held-out tasks and
   RL trains on the family it leaves weakest among those it solves sometimes: :mod:`coa.rl.family`);
8. ``evaluate.candidate`` (the **candidate** is the last model trained tonight: the RL model when
   RL runs, else the SFT model; :func:`candidate_step` names it) and ``evaluate.champion`` on the
   held-out tasks (the champion's evaluation is content-addressed: reused every night until the
   champion or the tasks change);
9. ``gate``: the promotion gate's verdict (:mod:`coa.registry.step`) as an artifact. The gate
   traces the candidate's lineage, so with RL it checks the RL step's steps run as well as SFT's,
   and the curation gates behind both.

The flow resolves the champion through the registry and the earlier nights through the
:class:`Ledger` before it plans. It applies the verdict to the registry and, once tonight's
collection is committed, records
the night in the :class:`Ledger` (``{root}/nightly/{run name}/{night}.json``, one file per night,
never rewritten), which is how the next night knows what was collected before.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

import schemas
from coa import io
from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import step as curate
from coa.errors import UserError
from coa.plan.choices import (
    CONVERTED_SFT,
    SFT_EVAL,
    evaluation,
    later_rounds,
    rl_after_evaluation,
    start_model,
    task_steps,
)
from coa.plan.config import PipelineConfig, PromotionConfig
from coa.registry.step import GATE, gate_step
from coa.settings import Settings
from coa.steps import Build, ModelInput, Step, StepInput, StepSummary, TableInput, Upstream
from coa.train import step as sft

NEW_TASKS = "nightly.new_tasks"
MERGE = "nightly.merge"
MERGED_TASKS = Upstream(MERGE, "tasks")
CANDIDATE_EVAL = "evaluate.candidate"
CHAMPION_EVAL = "evaluate.champion"
__all__ = [
    "CANDIDATE_EVAL",
    "CHAMPION_EVAL",
    "GATE",
    "MERGE",
    "NEW_TASKS",
    "MergeSummary",
    "NewTasksSummary",
    "SFT_EVAL",
    "Ledger",
    "Night",
    "candidate_step",
    "check_sections",
    "merge_step",
    "new_tasks_step",
    "nightly_plan",
    "tonight",
]


class Night(BaseModel):
    """What one night committed: its collection and the tasks it collected on."""

    model_config = ConfigDict(frozen=True)
    night: str
    collected: str
    tasks: str
    at: str


class Ledger:
    """The nights of one nightly configuration (``run_name``), one JSON file each."""

    def __init__(self, run_name: str, root: str | None = None, settings: Settings | None = None) -> None:
        store = io.Store(root, settings)
        self.fs, self.path = io.filesystem(io.join(store.root, "nightly", run_name), store.settings)

    def nights(self) -> list[Night]:
        if not self.fs.exists(self.path):
            return []
        files = sorted(p for p in self.fs.ls(self.path, detail=False) if p.endswith(".json"))
        out = []
        for path in files:
            if not posixpath.basename(path).startswith("."):
                with self.fs.open(path, "rb") as fh:
                    out.append(Night.model_validate_json(fh.read()))
        return out

    def before(self, night: str, limit: int | None = None) -> list[Night]:
        """The nights before ``night`` (by label order), at most the last ``limit``."""
        earlier = [n for n in self.nights() if n.night < night]
        return earlier if limit is None else earlier[len(earlier) - limit :] if limit else []

    def record(self, night: str, collected: str, tasks: str) -> Night:
        """Record ``night`` (a rerun of the same night keeps its first record)."""
        path = posixpath.join(self.path, f"{night}.json")
        entry = Night(night=night, collected=collected, tasks=tasks, at=dt.datetime.now(dt.UTC).isoformat())
        if self.fs.exists(path):
            with self.fs.open(path, "rb") as fh:
                return Night.model_validate_json(fh.read())
        io.write_atomic(self.fs, path, entry.model_dump_json(indent=2).encode())
        return entry


def tonight() -> str:
    """Tonight's label: the UTC date."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def nightly_plan(
    config: PipelineConfig,
    champion: ModelInput | None,
    earlier: Sequence[Night] = (),
    settings: Settings | None = None,
) -> list[Step]:
    """The steps of a night (see the module docstring); the gate is last.

    ``champion``: the registry's champion of ``promotion.model_name`` (resolved by the caller), None
    before the first promotion; ``earlier``: the nights whose data is curated with tonight's
    (:meth:`Ledger.before`)."""
    check_sections(config)
    assert config.collect and config.curate and config.convert and config.student and config.sft
    promotion = config.promotion or PromotionConfig()
    previous = {f"night{i}": _table(n.collected, "trajectories", settings) for i, n in enumerate(earlier)}
    previous_tasks = {f"night{i}": _table(n.tasks, "tasks", settings) for i, n in enumerate(earlier)}
    steps, source = task_steps(config)
    steps += [
        new_tasks_step(source, previous if promotion.new_tasks_only else {}),
        collect.step(config.collect, Upstream(NEW_TASKS, "tasks")),
        merge_step(
            Upstream("collect", "trajectories"), Upstream(NEW_TASKS, "tasks"), previous, previous_tasks
        ),
        curate.step(config.curate, Upstream(MERGE, "trajectories"), MERGED_TASKS),
        convert.step(config.convert, Upstream("curate", "trajectories"), MERGED_TASKS),
    ]
    base, built = start_model(
        config.student, CONVERTED_SFT, champion if promotion.sft_from == "champion" else None
    )
    steps += [*built, sft.step(config.sft, base, CONVERTED_SFT)]
    rounds, last = later_rounds(
        config, Upstream("sft"), Upstream(MERGE, "trajectories"), MERGED_TASKS, evaluated=False
    )
    assert last is not None
    steps += rounds + rl_after_evaluation(config, last, None)
    steps.append(evaluation(config, Upstream("rl") if config.rl is not None else last, CANDIDATE_EVAL))
    if champion is not None:
        steps.append(evaluation(config, champion, CHAMPION_EVAL))
    steps.append(
        gate_step(
            promotion.model_name,
            promotion.gate,
            Upstream(CANDIDATE_EVAL, "eval"),
            Upstream(CHAMPION_EVAL, "eval") if champion is not None else None,
        )
    )
    return steps


def _table(uri: str, table: str, settings: Settings | None) -> StepInput:
    return TableInput(io.open_artifact(uri, settings), table)


def check_sections(config: PipelineConfig) -> None:
    """A night needs every stage up to SFT, an evaluation and held-out synthetic tasks."""
    missing = [
        s
        for s in ("collect", "curate", "convert", "student", "sft", "evaluate")
        if getattr(config, s) is None
    ]
    if config.synthetic is None:
        missing.append("synthetic")
    if missing:
        raise UserError(
            f"nightly retraining needs the sections {', '.join(missing)} "
            "(held-out synthetic tasks are the benchmark the gate reads)"
        )


def candidate_step(steps: list[Step]) -> str:
    """The step whose model is tonight's candidate: the one ``evaluate.candidate`` evaluates."""
    model = next(s for s in steps if s.name == CANDIDATE_EVAL).inputs["model"]
    if not isinstance(model, Upstream):
        raise UserError(f"{CANDIDATE_EVAL} does not evaluate a model trained tonight ({model})")
    return model.step


# -- nightly.new_tasks ---------------------------------------------------------------------------


class NewTasksSummary(StepSummary):
    """What ``nightly.new_tasks`` kept of the tasks offered."""

    offered: int = Field(description="Tasks of tonight's task source.")
    collected_before: int = Field(description="Of them, tasks an earlier night collected.")
    new: int = Field(description="Tasks no earlier night collected (tonight's collection runs these).")


def new_tasks_step(tasks: StepInput, previous: Mapping[str, StepInput]) -> Step:
    """The tasks of ``tasks`` whose ids none of the ``previous`` collections (night → its
    ``trajectories``) holds."""
    inputs: dict[str, StepInput | None] = {"tasks": tasks}
    inputs.update(previous)
    return Step(
        name=NEW_TASKS,
        builder=NEW_TASKS,
        kind="tasks",
        artifact="new-tasks",
        config={"exclude": "task ids of earlier nights' collections"},
        build=_build_new_tasks,
        inputs=inputs,
        describe="tasks not collected on an earlier night",
        expects={"tasks": "task.v1", **{role: "trajectory.v1" for role in previous}},
        produces={"tasks": "task.v1"},
    )


def _build_new_tasks(b: Build) -> None:
    tasks = b.table("tasks").read()
    seen: set[str] = set()
    for role in b.inputs:
        if role != "tasks":
            seen.update(b.table(role).read(columns=["task_id"]).column("task_id").to_pylist())
    keep = pc.invert(pc.is_in(tasks["task_id"], pa.array(sorted(seen), pa.string())))
    fresh = tasks.filter(keep)
    b.writer.write_table("tasks", fresh, schemas.TASK)
    b.report(
        NewTasksSummary(
            offered=tasks.num_rows, collected_before=tasks.num_rows - fresh.num_rows, new=fresh.num_rows
        )
    )


# -- nightly.merge -------------------------------------------------------------------------------


class MergeSummary(StepSummary):
    """What ``nightly.merge`` put together."""

    nights: int = Field(description="Collections merged (tonight's and the earlier nights').")
    runs: int = Field(description="Runs of the merged table (a run id kept once).")
    tasks: int = Field(description="Tasks of the merged table (a task id kept once).")
    tonight: int = Field(description="Runs collected tonight.")


def merge_step(
    raw: StepInput,
    tasks: StepInput,
    previous: Mapping[str, StepInput],
    previous_tasks: Mapping[str, StepInput],
) -> Step:
    """Tonight's runs and tasks (``raw``, ``tasks``) with the earlier nights' ones (``previous``:
    night → its collection, ``previous_tasks``: night → its tasks); a run or task id kept once."""
    inputs: dict[str, StepInput | None] = {"raw": raw, "tasks": tasks}
    inputs.update({f"{role}.raw": value for role, value in previous.items()})
    inputs.update({f"{role}.tasks": value for role, value in previous_tasks.items()})
    return Step(
        name=MERGE,
        builder=MERGE,
        kind="trajectories",
        artifact="nightly-merged",
        config={"dedup": ["run_id", "task_id"]},
        build=_build_merge,
        inputs=inputs,
        describe="tonight's and earlier nights' runs and tasks, together",
        expects={role: ("task.v1" if role.endswith("tasks") else "trajectory.v1") for role in inputs},
        produces={"trajectories": "trajectory.v1", "tasks": "task.v1"},
    )


def _concat_unique(tables: list[pa.Table], key: str) -> pa.Table:
    seen: set[str] = set()
    parts = []
    for table in tables:
        ids = table.column(key).to_pylist()
        mask = []
        for value in ids:
            mask.append(value not in seen)
            seen.add(value)
        parts.append(table.filter(pa.array(mask, pa.bool_())))
    return pa.concat_tables(parts)


def _build_merge(b: Build) -> None:
    runs = [b.table(r).read() for r in sorted(b.inputs) if r == "raw" or r.endswith(".raw")]
    tasks = [b.table(r).read() for r in sorted(b.inputs) if r == "tasks" or r.endswith(".tasks")]
    merged_runs, merged_tasks = _concat_unique(runs, "run_id"), _concat_unique(tasks, "task_id")
    b.writer.write_table("trajectories", merged_runs, schemas.TRAJECTORY)
    b.writer.write_table("tasks", merged_tasks, schemas.TASK)
    b.report(
        MergeSummary(
            nights=len(runs),
            runs=merged_runs.num_rows,
            tasks=merged_tasks.num_rows,
            tonight=b.table("raw").rows(),
        )
    )
