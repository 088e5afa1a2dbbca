"""Typed step summaries (:mod:`coa.train.summary`, :mod:`coa.rl.summary`): read back from the JSON the
runner stores in lineage, older artifacts' records included."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coa.rl.summary import RLSummary
from coa.train.summary import SFTSummary

SFT_NOW = {
    "steps_planned": 4,
    "steps_run": 4,
    "final_loss": 2.5,
    "tokens_seen": 1200,
    "tokens_per_s": 300.0,
    "device": "cpu",
    "heldout_loss": 2.7,
    "n_heldout": 3,
    "overfit_warning": None,
    "loss_curve": [[1, 3.0], [4, 2.5]],
}


def test_an_sft_summary_round_trips_through_its_stored_json() -> None:
    s = SFTSummary.from_dict(SFT_NOW)
    assert s.loss_curve == ((1, 3.0), (4, 2.5)) and s.heldout_loss == 2.7
    assert s.to_dict() == SFT_NOW


def test_an_older_sft_record_reads_with_defaults_and_its_extra_keys_are_ignored() -> None:
    older = {k: v for k, v in SFT_NOW.items() if k not in ("heldout_loss", "n_heldout", "loss_curve")}
    s = SFTSummary.from_dict({**older, "loss_curve_points": 12, "packing": True})
    assert s.heldout_loss is None and s.n_heldout == 0 and s.loss_curve == ()
    assert "packing" not in s.to_dict()


def test_a_summary_without_what_every_sft_step_reports_is_refused() -> None:
    with pytest.raises(ValidationError, match="steps_run"):
        SFTSummary.from_dict({k: v for k, v in SFT_NOW.items() if k != "steps_run"})


def test_an_rl_summary_types_its_family_choice_and_learning_signal() -> None:
    stored = {
        "steps_planned": 2,
        "steps_run": 2,
        "rollouts": 8,
        "device": "cpu",
        "train_runtime_s": 3.5,
        "final_reward": 0.25,
        "final_entropy": 1.1,
        "curves": [{"step": 1.0, "reward": 0.25}],
        "heldout": [],
        "alarm": None,
        "learning_signal": {
            "episodes": 8,
            "correct_share": 0.25,
            "groups": 4,
            "groups_with_a_correct_episode": 2,
            "mixed_groups": 2,
            "families": {"math": {"episodes": 8, "correct_share": 0.25}},
        },
        "no_signal": None,
        "family_choice": {"family": "math", "accuracy": {"code": 0.0, "math": 0.5}, "rule": "r"},
    }
    s = RLSummary.from_dict(stored)
    assert s.family_choice is not None and s.family_choice.family == "math"
    assert s.learning_signal is not None and s.learning_signal.mixed_groups == 2
    assert RLSummary.from_dict(s.to_dict()) == s
    # a record from before the learning signal and the family choice were kept
    older = {k: v for k, v in stored.items() if k not in ("learning_signal", "family_choice", "no_signal")}
    assert RLSummary.from_dict(older).family_choice is None


def test_a_collect_summary_reads_the_first_call_and_the_retry() -> None:
    from coa.collect.summary import CollectSummary

    first = {
        "runs": 4,
        "completed": 3,
        "completion_rate": 0.75,
        "accuracy": None,
        "statuses": {"completed": 3, "error": 1},
        "failed_share": 0.25,
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "tool_calls": {"web_search": 2},
        "cost_usd": None,
        "errors_by_kind": {"llm": 1},
        "collect": {"planned": 4, "resumed": 1, "ran": 3, "budget_stopped": False},
        "warnings": ["no math task in the first 4"],
    }
    s = CollectSummary.from_dict(first)
    assert s.collect is not None and s.collect.resumed == 1 and s.repaired is None
    assert s.to_dict() == first  # what the step set, no more (a retry's `repaired` was never set)
    repair = {"of": "/store/x", "retried": 1, "still_failed": 0, "resumed": 0, "requests_sent": 2}
    older = {k: v for k, v in first.items() if k not in ("failed_share", "warnings", "collect")}
    retried = CollectSummary.from_dict({**older, "repaired": repair})
    assert retried.repaired is not None and retried.repaired.requests_sent == 2
    assert retried.failed_share == 0.0 and retried.warnings == () and retried.collect is None


def test_evaluation_summaries_share_their_headline_and_read_older_records() -> None:
    from coa.evaluate.summary import EvalReportSummary, EvalSummary, Headline, TrainingReportSummary

    stored = {
        "metrics": {"all": {"pass@1": 0.5, "n": 2}},
        "benchmarks": {"gsm8k": {"pass@1": 0.5}},
        "headline": "pass@1 50%",
        "report": "/store/eval/x/report.html",
    }
    s = EvalSummary.from_dict(stored)
    assert s.metrics["all"]["n"] == 2 and Headline.from_dict(stored).report == s.report
    assert s.to_dict() == stored
    older = EvalSummary.from_dict({"metrics": stored["metrics"]})  # before benchmarks and the report
    assert older.benchmarks == {} and older.headline == "" and older.report is None
    assert EvalReportSummary.from_dict({"headline": "h", "report": "r"}).headline == "h"
    rows = [{"model": "before", "accuracy": 0.25}, {"model": "after", "accuracy": 0.5}]
    report = TrainingReportSummary.from_dict({"comparison": rows, "report": "r"})
    assert report.comparison[1]["model"] == "after"
    with pytest.raises(ValidationError, match="metrics"):
        EvalSummary.from_dict({"headline": "h"})


def test_a_curate_summary_reads_with_and_without_rollouts() -> None:
    from coa.curate.step import CurateSummary

    stored = {
        "rows_in": 10,
        "rows_kept": 7,
        "rows_quarantined": 3,
        "reasons": {"duplicate": 2, "incorrect": 1},
        "gate_success": True,
        "failed_expectations": [],
        "headline": "7 of 10 kept",
        "report": "/store/curated/x/report.html",
    }
    s = CurateSummary.from_dict(stored)
    assert s.rows_kept == 7 and s.rollouts is None and s.student is None and s.to_dict() == stored
    counts = {"rollouts": 4, "incorrect": 1, "format_invalid": 0, "not_canonical": 0, "selected": 3}
    assert CurateSummary.from_dict({**stored, "rollouts": counts}).rollouts == counts
    assert CurateSummary.from_dict({**stored, "student": counts}).student == counts  # a round's samples


def test_a_task_import_summary_types_its_sources() -> None:
    from coa.tasksets.step import TasksSummary

    source = {"name": "gsm", "path": "a.jsonl", "layout": "qa", "rows_read": 3, "rows_ok": 2}
    source["rows_quarantined"] = 1
    s = TasksSummary.from_dict({"sources": [source], "tasks": 2, "quarantined": 1})
    assert s.sources[0].rows_ok == 2 and s.sources[0].rows_skipped_by_limit == 0
    assert s.to_dict()["sources"] == [source]  # as stored: a default the import did not set is not added
