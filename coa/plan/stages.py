"""The stage table: every stage, declared once (:class:`coa.steps.Stage`), by its name.

Each stage module declares its ``STAGE`` (a name, an artifact kind, a config type, a plain build
function, its inputs and outputs by contract, its summary type and what it presents); this table
lists them, and every entry layer reads it: the plans make steps of them, a step spec is rebuilt
from it on another machine (:mod:`coa.plan.spec`), the Prefect layer publishes what a step's stage
presents (``tasks.publish``: one publisher for all), ``coa run``'s result and the CLI read a step's
summary through its stage. A new stage is one folder, one line here and its place in a plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import step as curate
from coa.evaluate import step as evaluate
from coa.model import step as student
from coa.nightly import step as nightly
from coa.registry import step as gate
from coa.rl import step as rl
from coa.sample import step as sample
from coa.steps import Stage
from coa.synthetic import step as synthetic
from coa.tasksets import step as tasksets
from coa.train import step as sft

STAGES: Mapping[str, Stage] = {
    s.name: s
    for s in (
        synthetic.STAGE,
        tasksets.STAGE,
        collect.STAGE,
        collect.RETRY,
        curate.STAGE,
        sample.STAGE,
        convert.STAGE,
        student.STAGE,
        sft.STAGE,
        rl.STAGE,
        evaluate.STAGE,
        evaluate.PREDICTIONS,
        evaluate.EVAL_REPORT,
        evaluate.REPORT,
        nightly.NEW_TASKS_STAGE,
        nightly.MERGE_STAGE,
        gate.STAGE,
    )
}
"""Stage name (``Step.builder``, what a step spec names) → its declaration."""
