"""What a front end shows of a sampling step (:data:`coa.plan.stages.PRESENTERS`): per family, how
often the model solves its training tasks, once and at k, and how many tasks it solves only sometimes.

With ``samples`` = RL's group size, the last columns are RL's headroom: a task whose k attempts are all
correct or all wrong gives a GRPO group no advantage; only the mixed ones teach. Kept out of the step's
module, which never imports it, so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

from coa.facts import Facts, Table
from coa.sample.summary import SampleSummary
from coa.steps import StepResult


def present(s: SampleSummary, result: StepResult) -> Facts:
    """One row per family: tasks, pass@1 (the correct share of all attempts), pass@k, and the shares of
    tasks always, never and sometimes solved."""
    rows = [
        {
            "family": family,
            "tasks": f.tasks,
            "k": f.episodes // f.tasks if f.tasks else 0,
            "pass@1": round(f.correct, 3),
            "pass@k": round(f.tasks_solved, 3),
            "all correct": round(f.all_correct, 3),
            "all wrong": round(f.all_wrong, 3),
            "mixed": round(f.mixed, 3),
        }
        for family, f in sorted(s.families.items(), key=lambda item: item[0] == "all")
    ]
    title = f"Round {s.round} model's samples of its training tasks ({result.ref.uri})"
    return Facts((Table("samples", rows, title),))
