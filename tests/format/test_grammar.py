"""The four grammar variants: accepted trajectories and one rejection test per rule."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.format import GRAMMARS, TOOL_TAGS, Trajectory, render, validate
from coa.format.codec import scan
from coa.format.grammar import START, Grammar

from .samples import AFM, CODE, GOOD_REFLECTION, MATH, MHQA, POOR_REFLECTION, VALID, WEB, traj

Pairs = list[tuple[str, str]]


def rule_of(pairs: Pairs, variant: str) -> str | None:
    """The rule broken by ``pairs`` under ``variant``; asserts text and Trajectory inputs agree."""
    t = traj(pairs)
    by_traj = validate(t, variant)
    by_text = validate(render(t), variant)
    assert by_traj.rule == by_text.rule
    if by_text.error is not None:
        assert by_text.error.segment == by_traj.error.segment  # type: ignore[union-attr]
        assert by_text.error.position == by_traj.error.position  # type: ignore[union-attr]
    return by_text.rule


def replace(pairs: Pairs, i: int, *new: tuple[str, str]) -> Pairs:
    return pairs[:i] + list(new) + pairs[i + 1 :]


# -- accepted -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", GRAMMARS)
def test_samples_are_valid(variant: str) -> None:
    for pairs in VALID[variant]:
        result = validate(render(traj(pairs)), variant)
        assert result.ok and bool(result) and result.error is None, result.error


def test_model_style_text_validates_leniently() -> None:
    text = "".join(f"<{t}>{c}</{t}>" for t, c in WEB)
    assert validate(text, "web").rule == "layout"
    assert validate(text, "web", strict=False).ok


def test_unknown_variant() -> None:
    with pytest.raises(ValueError, match="unknown variant"):
        validate("", "nope")


def test_think_before_every_function_reads_through_arrows() -> None:
    # "plan → web_search" means plan → think → web_search; plan → web_search without think fails.
    assert rule_of(WEB, "web") is None
    assert WEB[1][0] == "plan" and WEB[2][0] == "think" and WEB[3][0] == "web_search"
    assert rule_of(replace(WEB, 2), "web") == "think_before"


def test_mhqa_free_text_reflection_and_direct_answer() -> None:
    assert rule_of(MHQA, "mhqa") is None  # reflection without grades is fine here
    assert rule_of(MHQA[:2] + [("think", "Sure already."), ("answer", "x")], "mhqa") is None


def test_low_score_then_replan_is_accepted() -> None:
    loop = [("double_check", "Score: 2\nOnly one source."), ("think", "Re-plan."), ("plan", "Other source."),
            ("think", "Search."), ("web_search", "q2"), ("observation", "r2"), ("think", "Suggest again."),
            ("suggested_answer", "1889"), ("think", "Check."), ("double_check", "Score: 4")]  # fmt: skip
    pairs = replace(WEB, 13, *loop)
    assert rule_of(pairs, "web") is None and rule_of(pairs, "afm") is None


def test_poor_reflection_then_replan_is_accepted() -> None:
    pairs = replace(WEB, 9, ("reflection", POOR_REFLECTION), ("think", "Re-plan."), ("plan", "Try the FAQ."))
    assert rule_of(pairs, "web") is None


# -- rejected, one case per rule ----------------------------------------------------------------------

CASES: list[tuple[str, str, Pairs, int | None]] = [
    # (variant, expected rule, trajectory, segment index of the error)
    ("mhqa", "tag_not_allowed", WEB, 3),
    ("web", "tag_not_allowed", MHQA, 3),
    ("web", "tag_not_allowed", replace(WEB, 6, ("code", "```py\nprint(1)\n```")), 6),
    ("code_math", "tag_not_allowed", replace(MATH, 0, ("web_search", "q")), 0),
    ("web", "empty_segment", replace(WEB, 5, ("think", " \n ")), 5),
    ("code_math", "empty_segment", replace(MATH, 3, ("observation", "")), 3),
    ("web", "answer_once", WEB[:-2], None),
    ("web", "answer_once", [*WEB, ("think", "Again."), ("answer", "1889")], 17),
    ("mhqa", "answer_once", [*MHQA[:-1], ("answer", "a"), ("answer", "b")], 12),
    ("web", "answer_last", [*WEB, ("think", "Afterthought.")], 16),
    ("web", "missing_observation", replace(WEB, 4), 4),
    ("code_math", "missing_observation", replace(MATH, 3), 3),
    ("web", "observation_without_tool", replace(WEB, 1, WEB[1], ("observation", "x")), 2),
    ("afm", "observation_without_tool", replace(AFM, 4, AFM[4], ("observation", "twice")), 5),
    ("web", "think_before", replace(WEB, 2), 2),
    ("web", "think_before", replace(WEB, 14), 14),
    ("afm", "think_before", replace(AFM, 0), 0),
    ("mhqa", "think_before", replace(MHQA, 8), 8),
    ("code_math", "think_before", replace(MATH, 1), 1),
    ("web", "think_position", replace(WEB, 2, ("think", "a"), ("think", "b")), 2),
    ("code_math", "think_position", [("think", "Before the plan."), *MATH], 0),
    ("code_math", "think_position", replace(MATH, 4, ("think", "Hmm."), MATH[4]), 4),
    ("web", "transition", replace(WEB, 3, ("reflection", GOOD_REFLECTION)), 3),  # plan → reflection
    ("web", "transition", WEB[2:], 1),  # does not begin with plan
    ("web", "transition", replace(WEB, 13, ("plan", "again")), 13),  # suggested_answer → plan
    ("web", "transition", WEB[:10] + WEB[14:], 11),  # reflection → answer
    ("mhqa", "transition", replace(MHQA, 3, ("reflection", "r")), 3),  # plan → reflection
    ("code_math", "transition", replace(MATH, 4, ("think", "Next."), ("code", "```py\nprint(2)\n```")), 5),
    ("code_math", "transition", [*MATH[:5], ("plan", "A second plan."), *MATH[5:]], 5),  # plan is single
    ("afm", "transition", [*AFM[:16], ("answer", "387.758")], 16),  # suggested_answer → answer
    ("afm", "transition", replace(AFM, 12, ("double_check", "Score: 4")), 12),  # code … → double_check
    ("web", "reflection_grades", replace(WEB, 9, ("reflection", "Looks fine to me.")), 9),
    ("afm", "reflection_grades", replace(AFM, 12, ("reflection", "Information Conflict: good")), 12),
    ("web", "double_check_score", replace(WEB, 13, ("double_check", "Looks right.")), 13),
    ("afm", "double_check_score", replace(AFM, 16, ("double_check", "Score: 7")), 16),
    ("web", "replan_after_poor_reflection", replace(WEB, 9, ("reflection", POOR_REFLECTION)), 11),
    ("afm", "replan_after_poor_reflection", replace(AFM, 12, ("reflection", POOR_REFLECTION)), 14),
    ("web", "answer_needs_double_check", replace(WEB, 13, ("double_check", "Score: 2")), 15),
    ("afm", "answer_needs_double_check", replace(AFM, 16, ("double_check", "score 1")), 18),
    ("web", "replan_after_low_score",
     replace(WEB, 13, ("double_check", "Score: 2"), ("think", "More."), ("web_search", "q")), 15),
]  # fmt: skip


@pytest.mark.parametrize(
    ("variant", "rule", "pairs", "segment"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_rejected(variant: str, rule: str, pairs: Pairs, segment: int | None) -> None:
    t = traj(pairs)
    result = validate(render(t), variant)
    assert not result.ok and result.rule == rule, result.error
    assert result.error is not None and result.error.segment == segment
    starts = [x.start for x in scan(render(t))] + [len(render(t))]
    assert result.error.position == starts[len(pairs) if segment is None else segment]
    assert validate(t, variant).rule == rule


def test_every_rule_has_a_rejection_case() -> None:
    rules = {
        "tag_not_allowed", "empty_segment", "nesting", "answer_once", "answer_last", "missing_observation",
        "observation_without_tool", "think_before", "think_position", "transition", "reflection_grades",
        "double_check_score", "replan_after_poor_reflection", "answer_needs_double_check",
        "replan_after_low_score",
    }  # fmt: skip
    assert rules - {c[1] for c in CASES} == {"nesting"}  # nesting: text can't carry it; see the next test


def test_nesting_in_a_trajectory_object() -> None:
    t = Trajectory.of(replace(WEB, 5, ("think", "I will write </think> here")))
    result = validate(t, "web")
    assert (result.rule, result.error.segment if result.error else None) == ("nesting", 5)
    bad_text = render(traj(WEB)).replace("Confirm on the page.", "Confirm <answer> on the page.")
    assert validate(bad_text, "web").rule == "nesting"  # as a parse error


def test_code_and_math_samples() -> None:
    assert rule_of(CODE, "code_math") is None and rule_of(MATH, "code_math") is None
    assert rule_of(CODE, "afm") == "think_before"  # afm needs a think before the plan


# -- the tables themselves ----------------------------------------------------------------------------


def test_tables_are_closed_and_answer_is_terminal() -> None:
    for g in GRAMMARS.values():
        assert set(g.after) == (g.tags - {"think", "observation"}) | {START}
        assert all(targets <= g.tags for targets in g.after.values())
        assert g.after["answer"] == frozenset() and "answer" in g.think_before
        assert "observation" not in g.think_before and "think" not in g.think_before
    assert GRAMMARS["web"].tools == ("web_search", "crawl_page")
    assert GRAMMARS["mhqa"].tools == ("wiki_search",)
    assert GRAMMARS["code_math"].tools == ("code",)
    assert GRAMMARS["afm"].tools == ("web_search", "crawl_page", "code", "visual_inspector")
    for name in ("web", "afm"):
        assert GRAMMARS[name].after["suggested_answer"] == {"double_check"}
        assert {f for f, nxt in GRAMMARS[name].after.items() if "answer" in nxt} == {"double_check"}


def _path_to_answer(g: Grammar, start: str) -> list[str]:
    """Shortest function sequence from ``start`` to ``answer`` (BFS over the table)."""
    seen, queue = {start: [start]}, deque([start])
    while queue:
        f = queue.popleft()
        for nxt in sorted(g.after[f]):
            if nxt not in seen:
                seen[nxt] = [*seen[f], nxt]
                queue.append(nxt)
    return seen["answer"][1:]


def _content(tag: str) -> str:
    special = {"reflection": GOOD_REFLECTION, "double_check": "Score: 4\nok.", "code": "```py\nprint(1)\n```"}
    return special.get(tag, f"some {tag} text")


def _realise(g: Grammar, functions: list[str]) -> Pairs:
    pairs: Pairs = []
    for f in functions:
        if f in g.think_before:
            pairs.append(("think", "reasoning"))
        pairs.append((f, _content(f)))
        if f in TOOL_TAGS:
            pairs.append(("observation", "tool output"))
    return pairs


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(GRAMMARS)), st.lists(st.integers(0, 10), max_size=12))
def test_random_walks_of_the_table_are_accepted(variant: str, choices: list[int]) -> None:
    g = GRAMMARS[variant]
    functions, last = [], START
    for c in choices:
        options = sorted(g.after[last] - {"answer"})
        if not options:
            break
        last = options[c % len(options)]
        functions.append(last)
    functions += _path_to_answer(g, last)
    assert rule_of(_realise(g, functions), variant) is None
