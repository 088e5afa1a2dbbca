"""Arithmetic family: every template parses back to its structure, and the expression is the answer."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.synthetic import arithmetic, generate


@pytest.mark.parametrize("template", sorted(arithmetic.TEMPLATES))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_every_template_and_phrasing_round_trips(template: str, seed: int) -> None:
    t = arithmetic.TEMPLATES[template]
    operands = t.draw(random.Random(seed))
    for variant, phrasing in enumerate(t.phrasings):
        question = phrasing.format(**operands)
        structure = arithmetic.parse_question(question)
        assert structure == arithmetic.structure_of(template, variant, operands)
        assert isinstance(arithmetic.evaluate(structure["expression"]), int)


@given(seed=st.integers(min_value=0, max_value=10_000), split=st.sampled_from(["train", "heldout"]))
@settings(max_examples=15, deadline=None)
def test_parse_recovers_generated_structure(seed: int, split: str) -> None:
    table = generate("arithmetic", 25, seed=seed, split=split)
    for row in table.to_pylist():
        structure = json.loads(row["metadata"])["structure"]
        assert arithmetic.parse_question(row["question"]) == structure
        assert row["gold_answers"] == [str(arithmetic.evaluate(structure["expression"]))]


def test_generation_covers_every_template_and_variant() -> None:
    table = generate("arithmetic", 400, seed=1)
    seen = {
        (s["template"], s["variant"])
        for s in (json.loads(m)["structure"] for m in table["metadata"].to_pylist())
    }
    phrasings = {name: len(t.phrasings) for name, t in arithmetic.TEMPLATES.items()}
    expected = {(name, v) for name in arithmetic.DEFAULT_TEMPLATES for v in range(phrasings[name])}
    assert seen == expected


def test_chain_template_only_when_asked() -> None:
    """templates=("chain",): `a op b op c` with operands 10-999 only, parsed back as chain; the default
    set and its tasks are unchanged by the option."""
    table = generate("arithmetic", 300, seed=3, split="train", arithmetic_templates=("chain",))
    for row in table.to_pylist():
        structure = json.loads(row["metadata"])["structure"]
        assert structure["template"] == "chain"
        assert arithmetic.parse_question(row["question"]) == structure
        numbers = [int(x) for x in re.findall(r"[0-9]+", structure["expression"])]
        assert len(numbers) == 3 and all(10 <= x <= 999 for x in numbers)
        assert row["gold_answers"] == [str(arithmetic.evaluate(structure["expression"]))]
    default = generate("arithmetic", 50, seed=3)
    explicit = generate("arithmetic", 50, seed=3, arithmetic_templates=arithmetic.DEFAULT_TEMPLATES)
    assert default.equals(explicit)
    assert "chain" not in {json.loads(m)["structure"]["template"] for m in default["metadata"].to_pylist()}
    with pytest.raises(ValueError, match="unknown arithmetic template"):
        generate("arithmetic", 5, arithmetic_templates=("nope",))


def test_problems_call_for_a_calculator() -> None:
    table = generate("arithmetic", 200, seed=2)
    for row in table.to_pylist():
        numbers = [int(x) for x in re.findall(r"[0-9]+", row["question"])]
        assert len(numbers) >= 2 and max(numbers) >= 100, row["question"]
        assert abs(int(row["gold_answers"][0])) >= 10 or "remainder" in row["question"]


def test_expression_is_restricted() -> None:
    assert arithmetic.evaluate("sum(range(3, 5 + 1))") == 12
    assert arithmetic.evaluate("(52311 - 873) // 47") == (52311 - 873) // 47
    for bad in ("__import__('os')", "open('x')", "1 if True else 2"):
        with pytest.raises(ValueError):
            arithmetic.evaluate(bad)


def test_unknown_question_is_rejected() -> None:
    with pytest.raises(ValueError):
        arithmetic.parse_question("What is the meaning of life?")
