"""Benchmark metrics: the unbiased pass@k against brute force, avg@K, maj@K, SE and cost-of-pass."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

import schemas
from coa.evaluate.config import TokenPrice
from coa.evaluate.metrics import (
    benchmark_metrics,
    eval_metrics,
    majority_correct,
    pass_at_k,
    powers_of_two,
    summarize,
)


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The fraction of k-subsets of the samples that hold at least one correct one."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_unbiased_pass_at_k_equals_enumeration_over_subsets(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(outcomes, k), abs=1e-12), (n, c, k)


def test_pass_at_k_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    assert powers_of_two(16) == [1, 2, 4, 8, 16] and powers_of_two(6) == [1, 2, 4]


def row(task: str, sample: int, correct: bool, prediction: str | None = "x", **kw: Any) -> dict[str, Any]:
    base = {
        "eval_id": f"m:{task}:{sample}", "model": "m", "task_id": task, "benchmark": kw.pop("benchmark", "b"),
        "family": kw.pop("family", "math"), "sample_index": sample, "prediction": prediction,
        "correct": correct, "score": float(correct), "format_valid": kw.pop("format_valid", True),
        "format_error": None, "n_turns": 1, "n_tool_calls": kw.pop("tool_calls", 0),
        "prompt_tokens": kw.pop("prompt_tokens", 100), "completion_tokens": kw.pop("tokens", 10),
        "total_tokens": 200, "gold_in_observation": kw.pop("leak", False), "latency_s": 0.1, "text": "",
        "error": None,
    }  # fmt: skip
    assert not kw
    return base


def test_avg_at_k_pass_at_k_and_standard_error_on_hand_made_rows() -> None:
    # task a: 3 of 4 correct; task b: 1 of 4; task c: 0 of 4.
    outcomes = {"a": [1, 1, 0, 1], "b": [0, 0, 1, 0], "c": [0, 0, 0, 0]}
    rows = [row(t, i, bool(v), tokens=10 * (i + 1)) for t, vs in outcomes.items() for i, v in enumerate(vs)]
    m = summarize(rows)
    assert m["tasks"] == 3 and m["runs"] == 12 and m["samples"] == 4
    assert m["pass@1"] == pytest.approx(4 / 12)
    means = [0.75, 0.25, 0.0]
    mean = sum(means) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in means) / 2 / 3)
    assert m["pass@1_se"] == pytest.approx(se)
    assert m["pass@2"] == pytest.approx((brute_pass_at_k([True, True, False, True], 2)
                                         + brute_pass_at_k([False, False, True, False], 2)) / 3)  # fmt: skip
    assert m["pass@4"] == pytest.approx(2 / 3) and "pass@3" not in m and "pass@8" not in m
    assert m["tokens_per_task"] == pytest.approx(25.0)
    assert m["tokens_per_solved"] == pytest.approx(300 / 4)


def test_majority_vote_groups_equivalent_answers() -> None:
    # "1/2", "0.5" and "\\frac{1}{2}" are one class (3 votes) against "2" (2 votes): the majority is right.
    preds = ["2", "\\frac{1}{2}", "0.5", "2", "1/2"]
    correct = [False, True, True, False, True]
    same = lambda a, b: {a, b} <= {"\\frac{1}{2}", "0.5", "1/2"}  # noqa: E731
    assert majority_correct(preds, correct, "math", same)
    # by string only, "2" has two votes and the others one each: the majority is wrong
    assert not majority_correct(preds, correct, "math", lambda a, b: False)
    # QA: normalised text; ties go to the answer seen first; runs without an answer do not vote
    assert majority_correct(
        ["The Paris!", "paris", "Lyon", None, None], [True, True, False, False, False], "mhqa"
    )
    assert not majority_correct(["Lyon", "Paris"], [False, True], "mhqa")
    assert not majority_correct([None, None], [False, False], "mhqa")


def test_maj_at_k_on_rows_and_none_for_code() -> None:
    rows = [row("a", i, p == "7", prediction=p) for i, p in enumerate(["7", "7", "8", "9"])]
    rows += [row("b", i, p == "3", prediction=p) for i, p in enumerate(["4", "3", "4", "5"])]
    m = summarize(rows)
    assert m["maj@4"] == pytest.approx(0.5) and m["pass@1"] == pytest.approx(3 / 8)
    code = summarize([row("c", 0, True, family="code"), row("c", 1, False, family="code")])
    assert "maj@2" not in code and code["pass@2"] == 1.0


def test_groups_per_benchmark_and_family_with_cost_of_pass_and_leaks() -> None:
    rows = [
        row("a", 0, True, benchmark="aime24", prompt_tokens=1000, tokens=500, tool_calls=2),
        row("a", 1, False, benchmark="aime24", prompt_tokens=1000, tokens=1500, leak=True),
        row("q", 0, True, benchmark="nq", family="mhqa", format_valid=False),
    ]
    table = schemas.EVAL.from_rows(rows)
    prices = {"m": TokenPrice(input_per_mtok=1.0, output_per_mtok=4.0)}
    by_bench = benchmark_metrics(table, prices)
    assert set(by_bench) == {"aime24", "nq", "all"}
    aime = by_bench["aime24"]
    cost = ((1000 * 1 + 500 * 4) + (1000 * 1 + 1500 * 4)) / 2 / 1e6
    assert aime["cost_per_task"] == pytest.approx(cost)
    assert aime["cost_of_pass"] == pytest.approx(cost / 0.5)
    assert aime["leak_rate"] == 0.5 and aime["tool_calls_per_task"] == 1.0
    by_family = eval_metrics(table)
    assert set(by_family) == {"math", "mhqa", "all"} and "cost_of_pass" not in by_family["all"]
    assert by_family["mhqa"]["format_valid"] == 0.0 and by_family["all"]["format_valid"] == pytest.approx(
        2 / 3
    )
    assert by_family["all"]["pass@1_se"] is not None
