"""Each filter rejects what it should, with its reason code and a detail, and keeps the rest."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from coa.curate.config import CurateConfig
from coa.curate.core import curate, row_payloads
from coa.curate.filters import FILTER_ORDER, check_coa, vector_checks
from coa.scoring.runs import fill_correct
from schemas.trajectory import TRAJECTORY
from tests.curate.rows import coa_check, no_gate, question, run, run_curate, score, table

FILTERS = {
    "filters": {
        "min_tokens": 200,
        "min_tool_calls": 1,
        "max_tool_calls": 3,
        "max_tool_errors": 1,
        "max_repeated_calls": 2,
    }
}


def _without_plan(row: dict[str, Any]) -> dict[str, Any]:
    steps = [dict(s, index=i) for i, s in enumerate(row["steps"][1:])]
    return {**row, "steps": steps, "n_steps": len(steps)}


def _cases() -> list[tuple[dict[str, Any], str]]:
    q = iter(range(100, 200))
    return [
        (run("incorrect", question(next(q)), "Someone Else"), "incorrect"),
        (run("unscored", question(next(q)), "print(1)", family="code", gold=()), "unscored"),
        (
            run(
                "step_limit",
                question(next(q)),
                None,
                status="step_limit",
                error="StepLimit: no verified answer",
            ),
            "unclean_end:step_limit",
        ),
        (
            run("time_limit", question(next(q)), None, status="time_limit", error="TimeLimit: 600 s"),
            "unclean_end:time_limit",
        ),
        (
            run("crashed", question(next(q)), None, status="error", error="ToolError: boom"),
            "unclean_end:error",
        ),
        (run("run_error", question(next(q)), error="ModelError: late failure"), "unclean_end:error"),
        (run("no_answer", question(next(q)), None), "unclean_end:no_answer"),
        (run("short", question(next(q)), tokens=(5, 1)), "too_short"),
        (run("long", question(next(q)), tokens=(60_000, 1_000)), "too_long"),
        (run("no_tools", question(next(q)), calls=[]), "too_few_tool_calls"),
        (
            run(
                "many_tools",
                question(next(q)),
                calls=[("web_search", f"query {k}", "result", None) for k in range(4)],
            ),
            "too_many_tool_calls",
        ),
        (
            run(
                "tool_errors",
                question(next(q)),
                calls=[("web_search", f"q{k}", "Error: timeout", "ToolTimeout: 30 s") for k in range(2)],
            ),
            "tool_errors",
        ),
        (
            run("repeats", question(next(q)), calls=[("web_search", "same query", "result", None)] * 3),
            "repeated_tool_calls",
        ),
        (_without_plan(run("no_plan", question(next(q)))), "invalid_coa"),
    ]


def test_each_filter_rejects_with_its_reason_and_keeps_the_rest(tmp_path: Path) -> None:
    cases = _cases()
    good = [run(f"good{i}", question(i)) for i in range(5)]
    rows = [r for pair in zip(good, [c[0] for c in cases[:5]], strict=False) for r in pair] + [
        c[0] for c in cases[5:]
    ]
    res, sink = run_curate([table(rows)], no_gate(**FILTERS), tmp_path)
    assert sink.reasons() == {r["run_id"]: reason for r, reason in cases}
    assert [r["run_id"] for r in sink.kept()] == [f"good{i}" for i in range(5)]
    assert all(r["correct"] is True for r in sink.kept())  # filled from the scorer
    assert res.rows_in == len(rows) == res.rows_kept + res.rows_quarantined
    for q in sink.rejected():
        assert q["stage"] == "curate" and q["source"] == "test-input" and q["detail"]
        payload = json.loads(q["payload"])
        assert payload["run_id"] == q["row_key"] and payload["steps"]
    details = {q["row_key"]: q["detail"] for q in sink.rejected()}
    assert "web_search" in details["repeats"] and "3 times" in details["repeats"]
    assert "ToolTimeout" in details["tool_errors"]
    assert "starts with a plan" in details["no_plan"]
    assert "step_limit" in details["step_limit"] and "StepLimit" in details["step_limit"]
    assert res.reasons == dict(Counter(reason for _, reason in cases))
    assert {r.split(":")[0] for r in res.reasons} <= set(FILTER_ORDER)


def test_filters_switched_off_keep_everything(tmp_path: Path) -> None:
    rows = [c[0] for c in _cases()]
    cfg = no_gate(
        filters={
            "require_correct": False,
            "require_clean_end": False,
            "max_tool_errors": None,
            "max_tokens": None,
            "max_tool_calls": None,
            "max_repeated_calls": None,
            "require_valid_coa": False,
        },
        dedup={"exact": False, "near": False, "max_per_task": None},
    )
    sink_curated: list[Any] = []
    res = curate(
        [table(rows)], cfg, score, None, {}, None, sink_curated.append, lambda t: None, str(tmp_path)
    )
    assert res.rows_kept == len(rows) and res.rows_quarantined == 0


def test_first_reason_wins_and_the_others_are_listed() -> None:
    row = run("both", question(1), "Wrong", calls=[("web_search", f"q{k}", "r", None) for k in range(5)])
    t, errors = fill_correct(table([row]), score)
    cfg = CurateConfig.model_validate(FILTERS).filters
    (rej,) = vector_checks(t, cfg, errors)
    assert rej is not None and rej.reason == "incorrect"
    assert "[also: too_many_tool_calls]" in rej.detail


def test_unscored_runs_kept_on_request_and_scorer_errors_recorded() -> None:
    rows = [
        run("code", question(1), "print(1)", family="code", gold=()),
        run("boom", question(2), "Mira Tolen"),
    ]

    def flaky(answer: str | None, golds: list[str], family: str) -> bool | None:
        if answer == "Mira Tolen":
            raise RuntimeError("scorer crashed")
        return score(answer, golds, family)

    t, errors = fill_correct(table(rows), flaky)
    assert t.column("correct").to_pylist() == [None, None]
    strict = vector_checks(t, CurateConfig().filters, errors)
    assert [r.reason if r else None for r in strict] == ["unscored", "unscored"]
    assert strict[1] is not None and "scorer crashed" in strict[1].detail
    lenient = vector_checks(
        t, CurateConfig.model_validate({"filters": {"keep_unscored": True}}).filters, errors
    )
    assert lenient == [None, None]


def test_a_raising_coa_check_is_an_invalid_coa_reason() -> None:
    def broken(row: dict[str, Any]) -> str | None:
        raise KeyError("steps")

    (rej,), (rendered,) = check_coa([run("x", question(1))], broken)
    assert rej is not None and rej.reason == "invalid_coa" and "KeyError" in rej.detail and rendered is None
    assert check_coa([run("y", question(2))], coa_check) == ([None], [None])
    rendering = lambda row: ("code_math", "<plan>\nAdd.\n</plan>\n")  # noqa: E731
    assert check_coa([run("z", question(3))], rendering) == (
        [None],
        [("code_math", "<plan>\nAdd.\n</plan>\n")],
    )


def test_payload_is_truncated_to_100k_characters(tmp_path: Path) -> None:
    row = run("big", question(3), "Wrong", observation="x " * 150_000)
    _, sink = run_curate([table([row])], no_gate(), tmp_path)
    (q,) = sink.rejected()
    assert q["reason"] == "incorrect" and len(q["payload"]) == 100_000


def test_payload_is_the_row_as_json() -> None:
    """The vectorised payloads say what ``json.dumps`` of each row says (timestamps in ISO 8601)."""
    rows = [
        run("a", question(4), "Wrong"),
        run("b", question(5) + ' ¿qué?\n 日本 \u2028 "quoted"', None, observation="line 1\nline 2\t\x01"),
    ]
    t = TRAJECTORY.conform(table(rows))

    def iso(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: iso(v) for k, v in value.items()}
        if isinstance(value, list):
            return [iso(v) for v in value]
        return value

    payloads = row_payloads(t)
    assert len(payloads) == 2 and all("\n" not in p for p in payloads)
    assert [json.loads(p) for p in payloads] == [iso(r) for r in t.to_pylist()]
    assert row_payloads(t.slice(0, 0)) == []


def test_config_rejects_inverted_ranges() -> None:
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError, match="min_tokens/max_tokens"):
        CurateConfig.model_validate({"filters": {"min_tokens": 10, "max_tokens": 5}})
    with pytest.raises(pydantic.ValidationError, match="extra"):
        CurateConfig.model_validate({"filters": {"max_tokenz": 5}})


def test_coa_check_reads_only_its_row_view(teacher_runs: list[dict[str, Any]]) -> None:
    """The narrowed rows curate hands the CoA check give the very verdicts whole rows give."""
    import copy

    import pyarrow as pa

    from coa.curate.filters import view_rows
    from coa.curate.step import COA_CHECK_ROW
    from coa.format.from_run import coa_check as real_check
    from schemas.trajectory import TRAJECTORY

    runs = copy.deepcopy(teacher_runs)
    broken = copy.deepcopy(runs[0])
    broken["run_id"] += "-noplan"
    broken["steps"] = [s for s in broken["steps"] if s["role"] != "plan"]
    no_answer = copy.deepcopy(runs[1])
    no_answer["run_id"] += "-noanswer"
    no_answer["final_answer"] = None
    whole = TRAJECTORY.from_rows([*runs, broken, no_answer])
    sliced = whole.slice(1)  # an offset into the steps' list array
    for t in (whole, sliced, whole.take(pa.array([3, 0, len(runs)]))):
        narrow = view_rows(t, COA_CHECK_ROW)
        assert set(narrow[0]) == set(COA_CHECK_ROW.columns)
        assert set(narrow[0]["steps"][0]) == set(COA_CHECK_ROW.step_fields)
        expected = [real_check(r) for r in t.to_pylist()]
        assert [real_check(r) for r in narrow] == expected
        assert any(isinstance(e, str) for e in expected) and any(isinstance(e, tuple) for e in expected)


def test_fill_correct_scores_each_distinct_answer_once() -> None:
    calls: list[tuple[str | None, list[str], str]] = []

    def counting(answer: str | None, golds: list[str], family: str) -> bool | None:
        calls.append((answer, golds, family))
        if answer == "boom":
            raise ValueError("cannot parse")
        return answer in golds

    rows = [
        run("a", question(1), "Mira Tolen"),
        run("b", question(1), "Mira Tolen"),
        run("c", question(1), "wrong"),
        run("d", question(1), "boom"),
        run("e", question(1), "boom"),
        run("f", question(1), "Mira Tolen", gold=("Someone Else",)),
    ]
    filled, errors = fill_correct(table(rows), counting)
    assert filled.column("correct").to_pylist() == [True, True, False, None, None, False]
    assert errors == [None, None, None, "ValueError: cannot parse", "ValueError: cannot parse", None]
    assert len(calls) == 4  # (Mira Tolen, gold), wrong, boom, (Mira Tolen, other gold)
