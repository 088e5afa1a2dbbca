"""Nightly retraining as a plan of steps, and the ledger of nights.

A night (a date, or any label) runs :func:`nightly_plan`:

1. the configured task source (synthetic families and/or imported task sets);
2. ``nightly.new_tasks``: only the tasks whose ids no earlier night collected (the earlier nights'
   collections are inputs of this step, so its key and lineage name them);
3. ``collect`` on the new tasks (budgeted and cached by the collect stage);
4. ``nightly.merge``: tonight's runs and tasks together with the earlier nights' ones (one
   ``trajectories`` and one ``tasks`` table; a run id seen twice is kept once);
5. ``curate`` (its dedup and decontamination then work across nights), ``convert``;
6. ``sft`` from the configured base or from the champion (``promotion.sft_from``);
7. ``rl`` on tonight's RL prompts from the SFT model, when the config has an ``rl`` section (with
   ``rl.families: auto``, ``evaluate.sft`` first evaluates the SFT model on the held-out tasks and
   RL trains on the family it leaves weakest among those it solves sometimes: :mod:`coa.rl.family`);
8. ``evaluate.candidate`` (the **candidate** is the last model trained tonight: the RL model when
   RL runs, else the SFT model; :func:`candidate_step` names it) and ``evaluate.champion`` on the
   held-out tasks (the champion's evaluation is content-addressed: reused every night until the
   champion or the tasks change);
9. ``gate``: the promotion gate's verdict (:mod:`coa.registry.gate`) as an artifact. The gate
   traces the candidate's lineage, so with RL it checks the RL step's steps run as well as SFT's,
   and the curation gates behind both.

The flow applies the verdict to the registry and, once tonight's collection is committed, records
the night in the :class:`Ledger` (``{root}/nightly/{run name}/{night}.json``, one file per night,
never rewritten), which is how the next night knows what was collected before.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

import schemas
from coa import io
from coa.errors import UserError
from coa.pipeline_config import PipelineConfig, eval_tools
from coa.registry.config import GateConfig, PromotionConfig
from coa.registry.store import Registry
from coa.settings import Settings
from coa.steps import Build, ModelInput, Step, StepInput, TableInput, Upstream

NEW_TASKS = "nightly.new_tasks"
MERGE = "nightly.merge"
GATE = "gate"
CANDIDATE_EVAL = "evaluate.candidate"
SFT_EVAL = "evaluate.sft"  # with rl.families: auto only
VERDICT_FILE = "verdict.json"


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
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def nightly_plan(config: PipelineConfig, night: str, registry: Registry, ledger: Ledger) -> list[Step]:
    """The steps of ``night`` (see the module docstring); the gate is last."""
    from coa.collect import step as collect
    from coa.convert import step as convert
    from coa.curate import step as curate
    from coa.evaluate import step as evaluate
    from coa.model import step as student
    from coa.rl import step as rl
    from coa.synthetic import step as synthetic
    from coa.tasksets import step as tasksets
    from coa.train import step as sft

    promotion = config.promotion or PromotionConfig()
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
    assert (
        config.collect
        and config.curate
        and config.convert
        and config.student
        and config.sft
        and config.evaluate
        and config.synthetic
    )
    steps: list[Step] = [synthetic.step(config.synthetic)]
    source: Upstream = Upstream("synthetic", "train")
    if config.tasks.sources:
        steps.append(tasksets.step(config.tasks))
        source = Upstream("tasks", "tasks")
    earlier = ledger.before(night, promotion.previous_nights)
    previous = {f"night{i}": io.open_artifact(n.collected, registry.settings) for i, n in enumerate(earlier)}
    steps.append(new_tasks_step(source, previous if promotion.new_tasks_only else {}))
    steps.append(collect.step(config.collect, Upstream(NEW_TASKS, "tasks")))
    earlier_tasks = {f"night{i}": io.open_artifact(n.tasks, registry.settings) for i, n in enumerate(earlier)}
    steps.append(merge_step(previous, earlier_tasks))
    steps.append(curate.step(config.curate, Upstream(MERGE, "trajectories"), Upstream(MERGE, "tasks")))
    steps.append(convert.step(config.convert, Upstream("curate", "trajectories"), Upstream(MERGE, "tasks")))
    champion = registry.champion(promotion.model_name)
    champion_model = ModelInput.parse(champion.model_uri) if champion else None
    base: StepInput
    if promotion.sft_from == "champion" and champion_model is not None:
        base = champion_model
    elif config.student.base is not None:
        base = ModelInput(external=config.student.base)
    else:
        steps.append(student.step(config.student, Upstream("convert", "sft")))
        base = Upstream("student")
    steps.append(sft.step(config.sft, base, Upstream("convert", "sft")))
    candidate = Upstream("sft")
    heldout, tools = Upstream("synthetic", "heldout"), eval_tools(config)
    if config.rl is not None:
        evaluation = None
        if config.rl.families == "auto":  # RL's family is picked from the SFT model's evaluation
            steps.append(evaluate.step(config.evaluate, tools, heldout, candidate, name=SFT_EVAL))
            evaluation = Upstream(SFT_EVAL, "eval")
        steps.append(rl.step(config.rl, candidate, Upstream("convert", "rl_prompts"), evaluation=evaluation))
        candidate = Upstream("rl")
    steps.append(evaluate.step(config.evaluate, tools, heldout, candidate, name=CANDIDATE_EVAL))
    if champion_model is not None:
        steps.append(evaluate.step(config.evaluate, tools, heldout, champion_model, name="evaluate.champion"))
    steps.append(
        gate_step(
            promotion.model_name,
            promotion.gate,
            Upstream(CANDIDATE_EVAL, "eval"),
            Upstream("evaluate.champion", "eval") if champion_model is not None else None,
        )
    )
    return steps


def candidate_step(steps: list[Step]) -> str:
    """The step whose model is tonight's candidate: the one ``evaluate.candidate`` evaluates."""
    model = next(s for s in steps if s.name == CANDIDATE_EVAL).inputs["model"]
    if not isinstance(model, Upstream):
        raise UserError(f"{CANDIDATE_EVAL} does not evaluate a model trained tonight ({model})")
    return model.step


# -- nightly.new_tasks ---------------------------------------------------------------------------


def new_tasks_step(tasks: StepInput, previous: dict[str, io.ArtifactRef]) -> Step:
    """The tasks of ``tasks`` whose ids none of the ``previous`` collections holds."""
    inputs: dict[str, StepInput | None] = {"tasks": tasks}
    inputs.update({role: TableInput(ref, "trajectories") for role, ref in previous.items()})
    return Step(
        name=NEW_TASKS,
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
    b.summary.update(
        offered=tasks.num_rows, collected_before=tasks.num_rows - fresh.num_rows, new=fresh.num_rows
    )


# -- nightly.merge -------------------------------------------------------------------------------


def merge_step(previous: dict[str, io.ArtifactRef], previous_tasks: dict[str, io.ArtifactRef]) -> Step:
    """Tonight's runs and tasks with the earlier nights' ones (a run or task id kept once)."""
    inputs: dict[str, StepInput | None] = {
        "raw": Upstream("collect", "trajectories"),
        "tasks": Upstream(NEW_TASKS, "tasks"),
    }
    inputs.update({f"{role}.raw": TableInput(ref, "trajectories") for role, ref in previous.items()})
    inputs.update({f"{role}.tasks": TableInput(ref, "tasks") for role, ref in previous_tasks.items()})
    return Step(
        name=MERGE,
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
    b.summary.update(
        nights=len(runs),
        runs=merged_runs.num_rows,
        tasks=merged_tasks.num_rows,
        tonight=b.table("raw").rows(),
    )


# -- gate ----------------------------------------------------------------------------------------


def gate_step(name: str, config: GateConfig, candidate: StepInput, champion: StepInput | None) -> Step:
    """The promotion gate's verdict on ``candidate`` (an eval.v1 table) against ``champion``."""
    return Step(
        name=GATE,
        kind="gate",
        artifact=name,
        config=config,
        build=_build_gate,
        inputs={"candidate": candidate, "champion": champion},
        describe="promotion gate: lineage checks, paired bootstrap per benchmark, primary gain",
        expects={"candidate": "eval.v1", "champion": "eval.v1"},
    )


def _build_gate(b: Build) -> None:
    from coa.registry.gate import decide

    config: GateConfig = b.step.config
    champion = b.optional("champion")
    verdict = decide(
        config, b.table("candidate").uri, champion.ref.uri if champion and champion.ref else None
    )
    b.writer.write_file(VERDICT_FILE, json.dumps(verdict.as_dict(), indent=2, default=str))
    b.summary.update(verdict.as_dict())


def verdict_markdown(name: str, model: str, verdict: dict[str, Any], outcome: str) -> str:
    """The verdict as the Prefect artifact of a night: outcome, checks, reasons, per-benchmark table."""
    lines = [f"# Promotion gate for `{name}`: {outcome}", "", f"candidate: `{model}`", ""]
    lines += [f"- {'✅' if ok else '❌'} {check}" for check, ok in verdict["checks"].items()]
    lines += ["", "## Reasons", ""] + [f"- {r}" for r in verdict["reasons"]]
    per = verdict.get("per_benchmark") or {}
    if per:
        lines += ["", "| benchmark | pairs | champion | candidate | delta | interval | regression |"]
        lines += ["|---|---|---|---|---|---|---|"]
        for bench, d in per.items():
            lines.append(
                f"| {bench} | {d['pairs']} | {d['baseline']:.3f} | {d['candidate']:.3f} | "
                f"{d['delta']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | "
                f"{'yes' if d['regression'] else 'no'} |"
            )
    return "\n".join(lines)
