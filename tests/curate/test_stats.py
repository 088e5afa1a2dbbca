"""The curate statistics' per-run metrics, counted by hand on a small mixed set of runs."""

from __future__ import annotations

import pyarrow as pa

from coa.curate.stats import CurationStats, StatsBuilder
from tests.curate.rows import question, run, table


def test_metrics_by_hand() -> None:
    rows = [
        run("a", question(1)),  # kept, correct
        run("b", question(2), "Wrong"),  # kept, incorrect
        run("c", question(3), family="math", gold=("3",), answer="3"),  # kept, unscored (null)
        run("d", question(4), None, status="step_limit"),  # quarantined
        run("e", question(5), family="math", gold=("5",), answer="5"),  # quarantined
    ]
    t = table(rows)
    t = t.set_column(
        t.schema.get_field_index("correct"), "correct", pa.array([True, False, None, False, True], pa.bool_())
    )
    builder = StatsBuilder()
    builder.add_batch(t.slice(0, 2), [None, None])
    builder.add_batch(t.slice(2), [None, "unclean_end:step_limit", "exact_duplicate"])
    summary = builder.stats(kept_tasks=3, gate=None)
    m = summary.metrics
    assert (summary.rows_in, summary.rows_kept, summary.rows_quarantined) == (5, 3, 2)
    assert summary.reasons == {"exact_duplicate": 1, "unclean_end:step_limit": 1}
    assert summary.to_dict()["families"] == {"math": {"in": 2, "kept": 1}, "mhqa": {"in": 3, "kept": 2}}
    assert summary.families["mhqa"].read == 3 and summary.families["mhqa"].kept == 2
    assert summary.statuses == {"completed": 4, "step_limit": 1}
    assert m.correct_rate_input == 2 / 4  # 4 scored runs, 2 correct
    assert m.correct_rate_kept == 1 / 2  # the kept unscored run is left out
    assert m.scored_rate_input == 4 / 5
    assert m.clean_end_rate_input == 4 / 5
    assert m.duplicate_rate == 1 / 5
    kept_steps = [r["n_steps"] for r in rows[:3]]
    assert m.mean_steps == sum(kept_steps) / 3
    assert m.median_steps == sorted(kept_steps)[1]
    assert summary.histograms["n_steps"].counts and summary.histograms["n_steps"].total == 3
    assert summary.histograms_input["tokens"].total == 5
    assert CurationStats.from_dict(summary.to_dict()) == summary  # summary.json reads back


def test_no_runs() -> None:
    summary = StatsBuilder().stats(kept_tasks=0, gate=None)
    assert summary.rows_in == 0 and summary.metrics.correct_rate_input is None
    assert summary.metrics.mean_steps is None and summary.families == {}
