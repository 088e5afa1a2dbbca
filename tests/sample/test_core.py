"""The sampling step's counts: pass@k and the tasks GRPO could learn from (mixed groups)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.sample.core import counts


def _rows(task: str, correct: list[bool]) -> list[dict[str, object]]:
    return [{"task_id": task, "correct": c, "format_valid": True} for c in correct]


def test_counts_give_pass_at_k_and_the_share_of_groups_that_all_agree() -> None:
    rows = [
        *_rows("a", [True, True, True, True]),  # always solved: no advantage in its group
        *_rows("b", [False, False, False, False]),  # never: nothing to reinforce
        *_rows("c", [True, False, False, False]),  # sometimes: a group GRPO learns from
        *_rows("d", [False, True, True, False]),
        *_rows("x", [False, False]),  # another family
    ]
    family = {"a": "code", "b": "code", "c": "code", "d": "code", "x": "math"}
    got = counts(rows, family)
    code = got["code"]
    assert code.tasks == 4 and code.episodes == 16
    assert code.correct == pytest.approx(7 / 16)  # pass@1 (every task sampled k times)
    assert code.tasks_solved == pytest.approx(3 / 4)  # pass@k
    assert (code.all_correct, code.all_wrong, code.mixed) == pytest.approx((1 / 4, 1 / 4, 1 / 2))
    assert (got["math"].all_wrong, got["math"].mixed) == (1.0, 0.0)
    everything = got["all"]
    assert (everything.tasks, everything.all_correct, everything.all_wrong) == (5, 1 / 5, 2 / 5)


def test_a_sampling_step_presents_rl_headroom_per_family(tmp_path: Path) -> None:
    from coa.facts import Table
    from coa.io import ArtifactRef
    from coa.plan.stages import STAGES, facts
    from coa.sample.summary import SampleSummary
    from coa.steps import StepResult

    rows = [*_rows("a", [True, True]), *_rows("c", [True, False]), *_rows("x", [False, False])]
    family = {"a": "code", "c": "code", "x": "math"}
    summary = SampleSummary(round=1, model="m", families=counts(rows, family))
    uri = str(tmp_path / "samples")
    ref = ArtifactRef(uri=uri, kind="samples", name="samples", key="k", content_hash="h", tables={})
    shown = facts(STAGES["sample"], StepResult("sample", ref, False, summary.model_dump(mode="json")))
    (table,) = [item for item in shown.items if isinstance(item, Table)]
    by_family = {row["family"]: row for row in table.rows}
    assert list(by_family) == ["code", "math", "all"]  # the families, then all
    assert by_family["code"] == {
        "family": "code", "tasks": 2, "k": 2, "pass@1": 0.75, "pass@k": 1.0,
        "all correct": 0.5, "all wrong": 0.0, "mixed": 0.5,
    }  # fmt: skip
    assert by_family["math"]["all wrong"] == 1.0 and by_family["math"]["mixed"] == 0.0
