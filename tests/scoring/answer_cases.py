"""NQ and AIME conformance cases from the fixtures' golds, each with the verdict of the benchmark's rule.

NQ (AFM's ``mhqa_eval``): normalise (lower-case, drop ASCII punctuation and the articles a/an/the,
collapse spaces), split the prediction on ``|``, drop empty parts, and the *first* part must equal a gold.
AIME (math-verify as AFM uses it): the answer's expression must equal the gold's numerically
(leading zeros, a box, ``$…$``, an equivalent fraction do not matter). The verdicts below are written
from those rules and the kind of rewriting, not computed by the scorers.

``python -m tests.scoring.answer_cases`` rewrites ``tests/scoring/golden/answer_cases.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden" / "answer_cases.jsonl"
NQ_TASKS = 60


def _nq(golds: list[str]) -> Iterator[tuple[str, str, bool]]:
    gold = golds[0]
    yield "verbatim", gold, True
    yield "upper_case", gold.upper(), True
    yield "article_and_period", f"The {gold}.", True
    yield "quoted", f'"{gold}"', True
    yield "curly_quoted", f"\u201c{gold}\u201d", False  # not ASCII punctuation: SQuAD keeps them
    yield "first_of_two", f"{gold} | Nobody Knows", True
    yield "second_of_two", f"Nobody Knows | {gold}", False
    yield "empty_first_part", f" | {gold}", True  # empty parts are dropped
    yield "extra_word", f"{gold} exactly", False
    if len(golds) > 1:
        yield "other_gold", golds[1], True
    if any(not ch.isascii() for ch in gold):
        yield "accents_dropped", gold.encode("ascii", "ignore").decode(), False
    yield "empty", "", False


def _aime(gold: str) -> Iterator[tuple[str, str, bool]]:
    n = int(gold)
    yield "boxed", f"\\boxed{{{gold}}}", True
    yield "plain", gold, True
    yield "no_leading_zeros", f"\\boxed{{{n}}}", True
    yield "sentence", f"The answer is \\boxed{{{n}}}.", True
    yield "inline_math", f"${n}$", True
    yield "fraction", f"\\boxed{{\\frac{{{2 * n}}}{{2}}}}", True
    yield "off_by_one", f"\\boxed{{{n + 1}}}", False
    yield "words", "I could not find it", False
    yield "empty", "", False


def build_cases(nq: list[dict[str, Any]], aime: list[str]) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for i, row in enumerate(nq[:NQ_TASKS]):
        golds = [str(a) for a in row["answer"]]
        for name, prediction, expected in _nq(golds):
            cases.append({"benchmark": "nq", "task": i, "golds": golds, "prediction": prediction,
                          "rewrite": name, "expected": expected})  # fmt: skip
    for i, gold in enumerate(aime):
        for name, prediction, expected in _aime(gold):
            cases.append({"benchmark": "aime24", "task": i, "golds": [gold], "prediction": prediction,
                          "rewrite": name, "expected": expected})  # fmt: skip
    return cases


def from_fixtures(fixtures: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    nq = [
        json.loads(line)
        for line in (fixtures / "nq_500.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]
    aime = [
        str(r["reward_model"]["ground_truth"]) for r in pq.read_table(fixtures / "aime24.parquet").to_pylist()
    ]
    return build_cases(nq, aime)


def read_golden() -> list[dict[str, Any]]:
    return [json.loads(line) for line in GOLDEN.read_text("utf-8").splitlines() if line.strip()]


if __name__ == "__main__":
    from tests.conftest import FIXTURES

    cases = from_fixtures(FIXTURES)
    GOLDEN.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), "utf-8")
    print(f"{len(cases)} cases -> {GOLDEN}")
