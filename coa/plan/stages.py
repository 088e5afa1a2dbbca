"""The stage table: every stage, declared once (:class:`coa.steps.Stage`), by its name.

Each stage module declares its ``STAGE`` (a name, an artifact kind, a config type, a plain build
function, its inputs and outputs by contract, its summary type and what it presents); this table
lists them, and every entry layer reads it: the plans make steps of them, a step spec is rebuilt
from it on another machine (:mod:`coa.plan.spec`), the Prefect layer publishes what a step's stage
presents (``tasks.publish``: one publisher for all), ``coa run``'s result and the CLI read a step's
summary through its stage. A new stage is one folder, one line here and its place in a plan.

What a stage shows of a step (:data:`PRESENTERS`, :func:`facts`) is listed here too, beside the
stages and not in them: each ``present`` module imports its stage's step module, never the reverse,
so a step's key (the import closure of its build, :meth:`coa.steps.Stage.code_files`) never hashes
its presentation, and editing what a stage shows rebuilds nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from coa.collect import present as collect_present
from coa.collect import step as collect
from coa.convert import step as convert
from coa.curate import present as curate_present
from coa.curate import step as curate
from coa.evaluate import present as evaluate_present
from coa.evaluate import step as evaluate
from coa.facts import Facts
from coa.model import present as student_present
from coa.model import step as student
from coa.nightly import step as nightly
from coa.registry import step as gate
from coa.rl import present as rl_present
from coa.rl import step as rl
from coa.sample import present as sample_present
from coa.sample import step as sample
from coa.steps import Present, Stage, StepResult
from coa.synthetic import step as synthetic
from coa.tasksets import present as tasksets_present
from coa.tasksets import step as tasksets
from coa.train import present as sft_present
from coa.train import step as sft
from coa.view.links import page_link

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

PRESENTERS: Mapping[str, Present] = {
    tasksets.STAGE.name: tasksets_present.present,
    collect.STAGE.name: collect_present.present,
    collect.RETRY.name: collect_present.present,
    curate.STAGE.name: curate_present.present,
    student.STAGE.name: student_present.present,
    sft.STAGE.name: sft_present.present,
    rl.STAGE.name: rl_present.present,
    sample.STAGE.name: sample_present.present,
    evaluate.STAGE.name: evaluate_present.present_eval,
    evaluate.PREDICTIONS.name: evaluate_present.present_eval,
    evaluate.EVAL_REPORT.name: evaluate_present.present_eval_report,
    evaluate.REPORT.name: evaluate_present.present_report,
}
"""Stage name → what a front end shows of its steps (tables, markdown, links, warnings); a stage not
here shows its summary's figures (:meth:`coa.steps.Stage.summary_facts`)."""


def facts(stage: Stage, result: StepResult) -> Facts:
    """What a front end (the Prefect publisher, the CLI) shows of ``result``, a step of ``stage``,
    and a link to the page of its episodes when it committed one (:mod:`coa.view.commit`)."""
    present = PRESENTERS.get(stage.name)
    if present is None:
        shown = stage.summary_facts(result)
    else:
        summary = stage.summary.from_dict(result.summary) if stage.summary is not None else result.summary
        shown = present(summary, result)
    link = page_link(result.ref)
    return shown if link is None else dataclasses.replace(shown, items=(*shown.items, link))
