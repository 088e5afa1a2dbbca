"""What each training step changed (:mod:`coa.evaluate.changes`): paired on the same held-out tasks,
with its interval, as ``coa run`` prints it and the training report shows it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coa.evaluate.changes import format_changes, step_changes
from coa.evaluate.compare import Delta
from coa.evaluate.training_report import render_report


def _eval(correct: dict[str, list[bool]]) -> pa.Table:
    """``eval.v1``'s columns a step's change reads: family → whether each of its tasks was solved."""
    rows = [
        {
            "task_id": f"{family}-{i}",
            "sample_index": 0,
            "family": family,
            "benchmark": f"bench-{family}",
            "correct": ok,
        }
        for family, oks in correct.items()
        for i, ok in enumerate(oks)
    ]
    return pa.Table.from_pylist(rows)


def test_each_step_is_compared_with_the_model_it_started_from_pair_by_pair() -> None:
    before = _eval({"code": [False] * 20, "math": [False] * 10})
    sft = _eval({"code": [True] * 10 + [False] * 10, "math": [True] * 9 + [False]})
    # round 2: 8 more programming tasks right, none lost (a change no draw of these pairs undoes);
    # math: one task won, one lost (a change of 0 whose interval holds 0)
    r2 = _eval({"code": [True] * 18 + [False] * 2, "math": [False] + [True] * 9})
    changes = step_changes([("before SFT", before), ("SFT", sft), ("round 2", r2)], samples=500)

    assert [(c.step, c.against) for c in changes] == [("SFT", "before SFT"), ("round 2", "SFT")]
    code, math, every = (changes[1].deltas[f] for f in ("code", "math", "all"))
    assert (code.pairs, code.baseline, code.candidate) == (20, 0.5, 0.9)
    assert code.delta == pytest.approx(0.4) and code.low > 0 and code.excludes_zero
    assert math.delta == 0.0 and math.low < 0 < math.high and not math.excludes_zero
    assert every.pairs == 30 and every.delta == pytest.approx(8 / 30)
    kept = Delta("math", "correct", 100, 1.0, 1.0, 0.0, 0.0, 0.0, 0.95)  # 100% before and after
    assert kept.points() == "+0.0 [+0.0, +0.0]" and not kept.excludes_zero
    assert code.points() == f"+40.0 [{100 * code.low:+.1f}, {100 * code.high:+.1f}]"

    table = format_changes(changes)
    header, rule, *lines = table.splitlines()
    assert header.split()[:2] == ["family", "tasks"] and "round 2 vs SFT" in header
    by_family = {line.split()[0]: line for line in lines}
    assert code.points() in by_family["code"] and math.points() in by_family["math"]
    assert by_family["code"].rstrip().endswith("*") and not by_family["math"].rstrip().endswith("*")
    assert by_family["math"].split()[1] == "10"  # the pairs each change was measured on
    # the same cells in the HTML report, with a panel per step
    page = render_report(title="t", rows=[], loss_png=None, facts={}, changes=changes)
    assert "What each step changed" in page and "round 2 vs SFT" in page and "+40.0 [" in page
    assert page.count("<img") == 2  # the before/after chart and the changes' panels
    # a model evaluated on other tasks than the one before it has no pairs: nothing to claim
    other = _eval({"mhqa": [True] * 5})
    lone = step_changes([("SFT", sft), ("RL", other)], samples=100)
    assert lone[0].deltas == {}
