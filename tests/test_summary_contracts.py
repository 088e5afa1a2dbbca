"""Each typed step summary against what its producer really stores: one tiny build of every step.

A real, tiny pipeline (synthetic → collect → curate → convert → student → sft → evaluations → rl →
the teacher → the report) plus the steps the demo does not plan (a task import, an evaluation report,
a round's sampling, the nightly new-tasks and merge steps, the promotion gate) is built once into a
private store. For each summary class, the summary its step stored in ``_lineage.json`` (and
``summary.json`` of the curate artifact) must

* read back through the class to exactly the stored JSON (a key the producer writes that the class
  does not declare, or a field the class renamed, fails here: the RL stage still writes a dict);
* equal the summary the runner handed back for the fresh build (one serialization, in the runner);
* have the shape of its golden file ``tests/golden/summaries/<Class>.json``: keys, and each value's
  kind (number, string, bool, list, null). A producer that adds, drops or renames a key changes the
  shape; rerun with ``COA_UPDATE_GOLDEN=1`` after an intended change and review the diff.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coa import io
from coa.collect.summary import CollectSummary
from coa.convert.step import ConvertSummary
from coa.curate.stats import CurationStats
from coa.curate.step import CurateSummary
from coa.evaluate import step as evaluate
from coa.evaluate.summary import EvalReportSummary, EvalSummary, TrainingReportSummary
from coa.model.step import StudentSummary
from coa.nightly.step import MergeSummary, NewTasksSummary, merge_step, new_tasks_step
from coa.plan import load_pipeline_config
from coa.plan.choices import eval_tools
from coa.plan.pipeline import plan
from coa.registry.config import GateConfig
from coa.registry.gate import Verdict
from coa.registry.step import gate_step
from coa.rl.summary import RLSummary
from coa.sample import step as sample
from coa.sample.config import SampleConfig
from coa.sample.summary import SampleSummary
from coa.steps import StepResult, Upstream, run_step
from coa.synthetic.step import SyntheticSummary
from coa.tasksets import step as tasksets
from coa.tasksets.config import TasksConfig
from coa.tasksets.step import TasksSummary
from coa.train.summary import SFTSummary
from tests.flows.test_pipeline_flow import SMALL

from .golden import check

REPO = Path(__file__).resolve().parents[1]

CLASSES: dict[str, type[Any]] = {
    "synthetic": SyntheticSummary,
    "tasks": TasksSummary,
    "collect": CollectSummary,
    "curate": CurateSummary,
    "convert": ConvertSummary,
    "student": StudentSummary,
    "sft": SFTSummary,
    "evaluate.after": EvalSummary,
    "rl": RLSummary,
    "report": TrainingReportSummary,
    "eval-report": EvalReportSummary,
    "sample": SampleSummary,
    "nightly.new_tasks": NewTasksSummary,
    "nightly.merge": MergeSummary,
    "gate": Verdict,
}
"""Step (of the tiny build) → the class its summary is read with."""

COLLECTED = Upstream("collect", "trajectories")
OPAQUE = {"config"}
"""Keys whose value is another model's config (the shape of curate's config is not this test's)."""


def shape(value: Any, key: str = "") -> Any:
    """Keys and kinds of a JSON value (lists by kind only: their lengths follow the data)."""
    if key in OPAQUE:
        return "object"
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return "list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StepResult]]:
    root = tmp_path_factory.mktemp("summaries") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COA_STORAGE_ROOT", str(root))
        mp.chdir(REPO)
        cfg = load_pipeline_config("configs/demo.yaml", SMALL)
        store = io.Store(str(root))
        imported = TasksConfig.model_validate(
            {"sources": [{"path": "configs/data/sample_tasks.jsonl", "family": "math", "limit": 3}]}
        )
        assert cfg.convert is not None
        sampling = SampleConfig.model_validate(
            {"families": ["math"], "limit_per_family": 2, "samples": 2, "max_turns": 2, "max_new_tokens": 8}
            | {"max_total_tokens": 16}  # its prompts: the sampled model's, from its lineage
        )
        steps = [*plan(cfg), tasksets.step(imported)]
        steps.append(
            sample.step(
                sampling,
                eval_tools(cfg),
                Upstream("sft"),
                Upstream("synthetic", "train"),
                1,
                encyclopedia=Upstream("synthetic", "encyclopedia"),
            )
        )
        steps += [
            evaluate.eval_report_step(
                "eval-report",
                Upstream("evaluate.after", "eval"),
                teacher=Upstream("collect.heldout", "trajectories"),
                tasks=Upstream("synthetic", "heldout"),
                baseline=Upstream("evaluate.before", "eval"),
                bootstrap_samples=50,
            ),
            new_tasks_step(Upstream("synthetic", "heldout"), {"night-1": COLLECTED}),
            merge_step(
                Upstream("collect.heldout", "trajectories"),
                Upstream("synthetic", "heldout"),
                {"night-1": COLLECTED},
                {"night-1": Upstream("synthetic", "train")},
            ),
            gate_step(
                "tiny-student",
                GateConfig(bootstrap_samples=100),
                Upstream("evaluate.after", "eval"),
                Upstream("evaluate.before", "eval"),
            ),
        ]
        done: dict[str, StepResult] = {}
        for step in steps:
            done[step.name] = run_step(step, store, done)
        yield done


def stored(result: StepResult) -> dict[str, Any]:
    """The summary as the artifact's lineage holds it (what a reused step hands back)."""
    record: dict[str, Any] = io.read_lineage(result.ref)["result"]["summary"]
    return record


@pytest.mark.parametrize("step", sorted(CLASSES))
def test_a_summary_reads_back_to_what_its_step_stored(built: dict[str, StepResult], step: str) -> None:
    cls = CLASSES[step]
    record = stored(built[step])
    assert built[step].summary == record  # the fresh result is the stored JSON, serialized once
    assert cls.from_dict(record).to_dict() == record, f"{cls.__name__} and the {step} step disagree"
    check(f"summaries/{cls.__name__}.json", shape(record))


def test_evaluation_and_sampling_prompt_as_their_model_was_trained(built: dict[str, StepResult]) -> None:
    """The prompt style is set once (``convert.prompt_style: brief`` in the demo): every evaluation and
    the round's sampling read it from their model's lineage, back to the conversion."""
    convert = io.read_lineage(built["convert"].ref)["config"]["config"]
    assert convert["prompt_style"] == "brief"  # the demo's; the default is full
    trained = {"prompt_style": "brief", "variants": convert["variants"], "from": built["convert"].ref.uri}
    for name in ("evaluate.before", "evaluate.after", "evaluate.after_rl", "sample"):
        lineage = io.read_lineage(built[name].ref)
        assert lineage["prompts"] == trained, name
        assert lineage["config"]["config"]["prompt_style"] is None  # no copy in the step's config (key)


def test_the_curation_statistics_read_back_to_summary_json(built: dict[str, StepResult]) -> None:
    document = json.loads(io.read_file(built["curate"].ref, "summary.json"))
    stats = CurationStats.from_dict(document)
    assert stats.to_dict() == document
    assert stats.rows_in == CurateSummary.from_dict(stored(built["curate"])).rows_in > 0
    check("summaries/CurationStats.json", shape(document))


def test_the_shape_check_catches_a_renamed_or_extra_key() -> None:
    """What the golden comparison sees: a key added or renamed changes the shape."""
    record = {"train": 3, "heldout": 1}
    assert shape(record) == {"train": "number", "heldout": "number"}
    assert shape({**record, "extra": "x"}) != shape(record)
    assert shape({"train": 3, "held_out": 1}) != shape(record)
    assert SyntheticSummary.from_dict({**record, "extra": "x"}).to_dict() != {**record, "extra": "x"}
