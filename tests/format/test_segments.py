"""The segment model: tags, parsed reflection grades and double-check scores."""

from __future__ import annotations

import pytest

from coa.format import TAGS, FormatError, ReflectionGrades, Segment, Trajectory, parse_double_check
from coa.format import parse_reflection as grades


def test_tag_sets() -> None:
    assert set(TAGS) == {
        "think", "plan", "reflection", "suggested_answer", "double_check", "answer",
        "web_search", "crawl_page", "wiki_search", "code", "visual_inspector", "observation",
    }  # fmt: skip


def test_unknown_tag_is_rejected() -> None:
    with pytest.raises(FormatError) as e:
        Segment("search", "x")
    assert e.value.rule == "unknown_tag"


@pytest.mark.parametrize(
    "text",
    [
        "Information Conflict: Good\nTool Effectiveness: Average\nTrajectory Monitoring: Fair",
        "(1) **Information Conflict**: good (no contradictions)\n(2) Tool Effectiveness - average\n"
        "(3) Trajectory Monitoring = fair",
        "information_conflict: GOOD; tool_effectiveness: average; trajectory monitoring: average",
    ],
)
def test_reflection_grades_parse(text: str) -> None:
    assert grades(text) == ReflectionGrades("good", "average", "average")


def test_reflection_poor_and_missing() -> None:
    g = grades("Information Conflict: poor\nTool Effectiveness: good\nTrajectory Monitoring: good")
    assert g is not None and g.any_poor
    assert grades("Information Conflict: good\nTool Effectiveness: good") is None  # one criterion missing
    assert (
        grades("Information Conflict: excellent\nTool Effectiveness: good\nTrajectory Monitoring: good")
        is None
    )


@pytest.mark.parametrize(
    ("text", "score"),
    [("Score: 4\nAll good.", 4), ("score 3/4", 3), ("**Score**: 2", 2), ("The score is 1.", 1),
     ("3 - fine", 3), ("Score of 4", 4), ("No score here.", None), ("Score: 5", None), ("Score: 3.5", None)],
)  # fmt: skip
def test_double_check_score(text: str, score: int | None) -> None:
    assert parse_double_check(text) == score


def test_fields_are_parsed_on_segments_and_ignored_by_equality() -> None:
    r = Segment(
        "reflection", "Information Conflict: good\nTool Effectiveness: poor\nTrajectory Monitoring: good"
    )
    assert r.grades == ReflectionGrades("good", "poor", "good") and r.score is None
    d = Segment("double_check", "Score: 2")
    assert d.score == 2 and d.grades is None
    assert Segment("think", "x").grades is None and Segment("think", "x").score is None
    assert d == Segment("double_check", "Score: 2") and hash(d) == hash(Segment("double_check", "Score: 2"))


def test_trajectory_of() -> None:
    t = Trajectory.of([("think", "a"), ("answer", "b")])
    assert t.tags == ("think", "answer") and len(t) == 2 and [s.content for s in t] == ["a", "b"]
