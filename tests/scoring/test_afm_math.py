"""AIME / MATH-500: our ``afm-math-verify`` scorer against math-verify called as AFM's reward calls it.

The publisher's side is math-verify (the pinned package) with exactly AFM's calls
(``mathverify.compute_score`` on the ``<answer>`` content): ``parse(answer, parsing_timeout=5)``,
fewer than two items is 0, ``str(parsed[1])`` among the golds is 1, else ``verify(parse("\\boxed{gold}"),
parsed, timeout_seconds=5)``; no length limit. Ours is ``score_task`` on the ``task.v1`` row. The
answers are generated from the fixtures' golds, short and long: whole responses of 2,000 to
12,000 characters of reasoning with the ``\\boxed{}`` at the end (right or wrong), a box early and
another at the end, no box at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from math_verify import parse, verify

from coa.scoring.benchmarks import SCORERS, score_task
from coa.scoring.math import MAX_EXPRESSION_CHARS

REASONING = (
    "We consider the cases one at a time. Let $x$ be the number of ways; by symmetry $x = 2y + 3$ where "
    "$y$ counts the arrangements with the first element fixed, and $y \\le 17$ in every case. "
)


def afm_compute_score(answer: str, golds: list[str]) -> bool:
    """AFM's math reward on an answer (the calls its ``mathverify.compute_score`` makes)."""
    parsed = parse(answer, parsing_timeout=5)
    if len(parsed) < 2:
        return False
    if str(parsed[1]) in golds:
        return True
    return any(verify(parse("\\boxed{" + g + "}"), parsed, timeout_seconds=5) for g in golds)


def rewrites(gold: str) -> list[tuple[str, str]]:
    wrong = "\\frac{1}{7}" if gold != "\\frac{1}{7}" else "2"
    long = REASONING * 30  # ~5,800 characters
    return [
        ("boxed", f"\\boxed{{{gold}}}"),
        ("plain", gold),
        ("sentence", f"The answer is $\\boxed{{{gold}}}$."),
        ("wrong", f"\\boxed{{{wrong}}}"),
        ("long_right", f"{long}Therefore the answer is $\\boxed{{{gold}}}$."),
        ("very_long_right", f"{long * 2}So we get \\boxed{{{gold}}}"),
        ("long_wrong", f"{long}Therefore the answer is $\\boxed{{{wrong}}}$."),
        ("long_early_box", f"First guess \\boxed{{{wrong}}}. {long}Final: \\boxed{{{gold}}}"),
        ("long_no_box", f"{long}I could not finish."),
        ("short_wrong_words", "I do not know"),
    ]


def golds(afm_fixtures: Path, name: str, n: int) -> list[str]:
    table = pq.read_table(afm_fixtures / name, columns=["reward_model"])
    return [str(row["ground_truth"]) for row in table.column("reward_model").to_pylist()][:n]


def test_our_scorer_and_afms_math_verify_agree_on_every_generated_answer(afm_fixtures: Path) -> None:
    sets = {
        "aime24": golds(afm_fixtures, "aime24.parquet", 30),
        "math500": golds(afm_fixtures, "math500.parquet", 20),
    }
    disagree: list[tuple[str, str, str]] = []
    cases = old_disagree = long_cases = 0
    verdicts: dict[str, set[bool]] = {}
    for source, gold_list in sets.items():
        for gold in gold_list:
            task: dict[str, Any] = {
                "source": source,
                "family": "math",
                "gold_answers": [gold],
                "metadata": "{}",
            }
            for name, answer in rewrites(gold):
                cases += 1
                theirs = afm_compute_score(answer, [gold])
                ours = score_task(task, answer)
                assert ours.scorer.name == "afm-math-verify"
                verdicts.setdefault(name, set()).add(theirs)
                if ours.correct != theirs:
                    disagree.append((source, gold, name))
                long_cases += len(answer) > MAX_EXPRESSION_CHARS
                old_disagree += theirs and len(answer) > MAX_EXPRESSION_CHARS  # the old too_long rule
    print(f"math: {cases} generated answers ({long_cases} over {MAX_EXPRESSION_CHARS} chars), "
          f"{cases - len(disagree)} agree; the old length rule disagreed on {old_disagree}")  # fmt: skip
    assert disagree == [] and cases == 500 and long_cases == 250
    assert verdicts["long_right"] == {True} and verdicts["long_wrong"] == {False} and old_disagree > 0


def test_a_long_response_is_parsed_and_named_with_its_package() -> None:
    answer = REASONING * 60 + "Hence $\\boxed{204}$."
    verdict = score_task(
        {"source": "aime24", "family": "math", "gold_answers": ["204"], "metadata": "{}"}, answer
    )
    assert len(answer) > 10_000 and verdict.correct and "too_long" not in verdict.detail
    assert SCORERS["afm-math-verify"].info.package == "math-verify 0.9.0"


def test_the_rule_is_the_same_from_a_worker_thread() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from coa.scoring.math import afm_math_verify

    long = REASONING * 40 + "Hence $\\boxed{204}$."
    with ThreadPoolExecutor(1) as pool:  # no signals in a thread: the worker processes decide
        assert pool.submit(afm_math_verify, long, ["204"]).result() == (True, "string")
        assert pool.submit(afm_math_verify, long, ["205"]).result() == (False, "not_equal")
