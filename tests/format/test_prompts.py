"""System prompts: versioned data files that state exactly the grammar of their variant."""

from __future__ import annotations

import re

import pytest

from coa.format import GRAMMARS, VARIANTS, system_prompt
from coa.format.grammar import START
from coa.format.prompts import system_prompt as cached

TAG_RE = re.compile(r"<(\w+)>")


@pytest.mark.parametrize("variant", GRAMMARS)
def test_prompt_loads_with_version(variant: str) -> None:
    text, version = system_prompt(variant)
    assert re.search(r"-v\d+$", version) and text == text.strip() and len(text) > 500
    assert cached(variant) is cached(variant)


def test_unknown_variant() -> None:
    with pytest.raises(ValueError, match="unknown variant"):
        system_prompt("nope")


@pytest.mark.parametrize("variant", GRAMMARS)
def test_prompt_names_exactly_the_variant_tags(variant: str) -> None:
    text, _ = system_prompt(variant)
    assert set(TAG_RE.findall(text)) == GRAMMARS[variant].tags


@pytest.mark.parametrize("variant", GRAMMARS)
def test_prompt_order_rules_match_the_state_machine(variant: str) -> None:
    g = GRAMMARS[variant]
    lines = [line.strip() for line in system_prompt(variant)[0].splitlines()]
    after = {m.group(1): set(TAG_RE.findall(m.group(2)))
             for line in lines if (m := re.match(r"- After <(\w+)>: (.*)", line))}  # fmt: skip
    assert after == {f: set(nxt) for f, nxt in g.after.items() if f != START and nxt}
    [think_line] = [line for line in lines if line.startswith("- Think first:")]
    assert set(TAG_RE.findall(think_line)) - {"think"} == g.think_before
    [begin] = [line for line in lines if line.startswith("- Begin with")]
    assert set(TAG_RE.findall(begin)) == g.after[START]


@pytest.mark.parametrize("variant", ["web", "afm"])
def test_scoring_conventions(variant: str) -> None:
    text, _ = system_prompt(variant)
    for criterion in ("Information Conflict", "Tool Effectiveness", "Trajectory Monitoring"):
        assert re.search(rf"{criterion}: good .*\| average .*\| poor", text)
    assert 'Start with "Score: N"' in text and "4 = fully correct" in text and "1 = wrong" in text


def test_answer_conventions() -> None:
    assert "\\boxed{...}" in system_prompt("code_math")[0] and "```py" in system_prompt("code_math")[0]
    assert 'separate them with "|"' in system_prompt("mhqa")[0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_brief_prompt_is_one_line_with_its_own_version(variant: str) -> None:
    text, version = system_prompt(variant, "brief")
    full, full_version = system_prompt(variant)
    assert "\n" not in text and len(text) < len(full) / 4
    assert version == f"{full_version}-brief"
    with pytest.raises(ValueError, match="prompt style"):
        system_prompt(variant, "long")  # type: ignore[arg-type]
