"""Shared machinery of the synthetic task families: seeds, the split rule, task rows.

Everything here is pure and deterministic. Randomness comes only from :func:`rng_for`, a
:class:`random.Random` seeded from a SHA-256 of its parts, so a family/seed/split triple always
yields the same tasks on every platform.

**Splits.** A candidate problem belongs to exactly one split, decided by a hash of its *split key*
(:func:`split_of`): the structure that identifies the problem (template and operands, start entity,
spec and parameters), never the seed. ``train`` and ``heldout`` are additionally generated from
different seeds, and :func:`assert_disjoint` checks that two tables share no question. So no seed
choice can leak a held-out question into training.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from coa.errors import UserError
from coa.synthetic.config import SPLITS, Split
from schemas import TASK

HELDOUT_BUCKETS = 5
"""One split-key bucket in ``HELDOUT_BUCKETS`` (20 %) belongs to ``heldout``, the rest to ``train``."""

GENERATOR = "coa.synthetic"


class SyntheticError(UserError, ValueError):
    """A synthetic family cannot produce what was asked (unknown family, too few unique tasks, …)."""


def digest(*parts: object) -> int:
    """A stable 64-bit integer from ``parts`` (independent of ``PYTHONHASHSEED``)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def rng_for(*parts: object) -> random.Random:
    """A private random generator seeded from ``parts`` (e.g. family, seed, split)."""
    return random.Random(digest("coa-synthetic", *parts))


def split_of(split_key: str) -> Split:
    """The one split a problem with this structural key belongs to."""
    return "heldout" if digest("coa-synthetic-split", split_key) % HELDOUT_BUCKETS == 0 else "train"


def check_split(split: str) -> Split:
    if split not in SPLITS:
        raise SyntheticError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return split  # type: ignore[return-value]


def task_row(
    *,
    family_name: str,
    task_family: str,
    split: Split,
    index: int,
    seed: int,
    question: str,
    gold_answers: Sequence[str],
    structure: dict[str, Any],
    test_cases: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``task.v1`` row; ``structure`` (what ``parse_question`` must recover) goes in the metadata."""
    metadata: dict[str, Any] = {
        "generator": GENERATOR,
        "synthetic_family": family_name,
        "split": split,
        "seed": seed,
        "template": structure.get("template"),
        "structure": structure,
    }
    if extra:
        metadata.update(extra)
    source = f"synthetic-{family_name}"
    return {
        "task_id": f"{source}:{split}-{index:05d}",
        "source": source,
        "family": task_family,
        "question": question,
        "gold_answers": list(gold_answers),
        "test_cases": test_cases,
        "source_index": index,
        "metadata": json.dumps(metadata, sort_keys=True, ensure_ascii=False),
    }


def to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows → a conforming ``task.v1`` table, after checking that no question repeats."""
    assert_unique(r["question"] for r in rows)
    return TASK.from_rows(rows) if rows else TASK.empty_table()


def assert_unique(questions: Iterable[str]) -> None:
    seen: set[str] = set()
    for q in questions:
        if q in seen:
            raise AssertionError(f"duplicate synthetic question: {q[:120]!r}")
        seen.add(q)


def assert_disjoint(a: pa.Table, b: pa.Table) -> None:
    """Raise ``AssertionError`` if two task tables share a question (e.g. train vs heldout)."""
    shared = set(a.column("question").to_pylist()) & set(b.column("question").to_pylist())
    if shared:
        example = sorted(shared)[0]
        raise AssertionError(f"{len(shared)} question(s) shared between splits, e.g. {example[:120]!r}")


def draw_unique(
    rng: random.Random,
    n: int,
    split: Split,
    candidate: Any,
    *,
    what: str,
    max_tries_per_task: int = 200,
) -> list[Any]:
    """Draw ``n`` candidates of ``split`` with distinct questions.

    ``candidate(rng)`` returns an object with ``.question``, ``.split_key`` and ``.dedup_key`` (the
    problem, regardless of phrasing); candidates of the other split and repeated problems or
    questions are skipped. Raises :class:`SyntheticError` when the space of unique problems runs out.
    """
    out: list[Any] = []
    seen: set[str] = set()
    seen_problems: set[str] = set()
    tries = 0
    budget = max(1000, n * max_tries_per_task)
    while len(out) < n:
        tries += 1
        if tries > budget:
            raise SyntheticError(
                f"{what}: found only {len(out)} unique {split} problems of the {n} asked for; "
                "ask for fewer or enlarge the problem space"
            )
        cand = candidate(rng)
        if cand.question in seen or cand.dedup_key in seen_problems or split_of(cand.split_key) != split:
            continue
        seen.add(cand.question)
        seen_problems.add(cand.dedup_key)
        out.append(cand)
    return out
