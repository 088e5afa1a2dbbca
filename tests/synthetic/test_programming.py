"""Programming family: specs parse back, and test cases are what the reference programs print."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.synthetic import generate, program_specs, programming


def test_every_spec_and_parameter_set_round_trips() -> None:
    count = 0
    for spec in program_specs.SPECS.values():
        for params in spec.space():
            question = programming.render_question(spec.id, params, "1\n", "1\n")
            assert programming.parse_question(question) == programming.structure_of(spec.id, params)
            count += 1
    assert count == len(programming.problems("train")) + len(programming.problems("heldout"))
    assert count > 1000


@given(seed=st.integers(min_value=0, max_value=10_000), split=st.sampled_from(["train", "heldout"]))
@settings(max_examples=10, deadline=None)
def test_parse_recovers_generated_structure_and_tests_match_reference(seed: int, split: str) -> None:
    table = generate("programming", 20, seed=seed, split=split)
    for row in table.to_pylist():
        structure = json.loads(row["metadata"])["structure"]
        assert programming.parse_question(row["question"]) == structure
        tests = row["test_cases"]
        assert tests["kind"] == "stdin" and len(tests["stdin"]) == program_specs.N_TESTS
        source = programming.reference_solution(structure["spec"], structure["params"])
        for stdin, expected in zip(tests["stdin"], tests["expected_output"], strict=True):
            assert programming.run_program(source, stdin) == expected
        shown_in, shown_out = tests["stdin"][0].rstrip(), tests["expected_output"][0].rstrip()
        assert row["question"].endswith(f"Example input:\n{shown_in}\n\nExample output:\n{shown_out}")


def test_specs_are_balanced() -> None:
    table = generate("programming", 140, seed=4)
    specs = [json.loads(m)["structure"]["spec"] for m in table["metadata"].to_pylist()]
    counts = {s: specs.count(s) for s in program_specs.SPECS}
    assert min(counts.values()) >= 2, counts


@pytest.mark.parametrize("spec", sorted(program_specs.SPECS))
def test_reference_programs_run_as_real_programs(spec: str) -> None:
    params = program_specs.SPECS[spec].space()[0]
    source = programming.reference_solution(spec, params)
    stdin = program_specs.SPECS[spec].inputs(random.Random(0), params)[0]
    done = subprocess.run(
        [sys.executable, "-c", source], input=stdin, capture_output=True, text=True, timeout=20, check=True
    )
    assert done.stdout == programming.run_program(source, stdin)


def test_run_program_raises_eof_like_python() -> None:
    with pytest.raises(EOFError):
        programming.run_program("input()\ninput()\n", "one line\n")


def test_unknown_question_is_rejected() -> None:
    with pytest.raises(ValueError):
        programming.parse_question("Write a web browser in Rust.")
