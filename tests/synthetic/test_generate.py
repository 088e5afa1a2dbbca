"""The family-independent contract of coa.synthetic: task.v1 rows, determinism, disjoint splits."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest
from pydantic import ValidationError

from coa.synthetic import (
    SPLITS,
    SYNTHETIC_FAMILIES,
    TASK_FAMILY,
    SyntheticConfig,
    SyntheticError,
    assert_disjoint,
    generate,
    generate_all,
    parse_question,
    split_of,
)
from schemas import TASK

SMALL = {"arithmetic": 40, "multihop": 40, "programming": 30}


@pytest.mark.parametrize("family", SYNTHETIC_FAMILIES)
def test_rows_conform_to_task_v1(family: str) -> None:
    table = generate(family, SMALL[family], seed=3, split="train")
    assert table.num_rows == SMALL[family]
    assert TASK.conform(table).equals(table)
    rows = table.to_pylist()
    assert [r["task_id"] for r in rows] == [f"synthetic-{family}:train-{i:05d}" for i in range(len(rows))]
    assert {r["source"] for r in rows} == {f"synthetic-{family}"}
    assert {r["family"] for r in rows} == {TASK_FAMILY[family]}
    assert [r["source_index"] for r in rows] == list(range(len(rows)))
    for r in rows:
        meta = json.loads(r["metadata"])
        assert meta["generator"] == "coa.synthetic" and meta["split"] == "train" and meta["seed"] == 3
        assert parse_question(family, r["question"]) == meta["structure"]
        if family == "programming":
            assert r["gold_answers"] == [] and r["test_cases"]["kind"] == "stdin"
        else:
            assert len(r["gold_answers"]) == 1 and r["gold_answers"][0] and r["test_cases"] is None
    if family == "arithmetic":
        assert all(re.fullmatch(r"-?[0-9]+", r["gold_answers"][0]) for r in rows)


@pytest.mark.parametrize("family", SYNTHETIC_FAMILIES)
def test_deterministic_and_seed_sensitive(family: str) -> None:
    n = SMALL[family]
    a = generate(family, n, seed=11, split="heldout")
    assert a.equals(generate(family, n, seed=11, split="heldout"))
    b = generate(family, n, seed=12, split="heldout")
    assert a.column("question").to_pylist() != b.column("question").to_pylist()


@pytest.mark.parametrize("family", SYNTHETIC_FAMILIES)
@pytest.mark.parametrize("seeds", [(0, 0), (0, 1), (7, 3)])
def test_train_and_heldout_never_share_a_question(family: str, seeds: tuple[int, int]) -> None:
    train = generate(family, 150, seed=seeds[0], split="train")
    heldout = generate(family, 60, seed=seeds[1], split="heldout")
    assert_disjoint(train, heldout)
    for split, table in (("train", train), ("heldout", heldout)):
        questions = table.column("question").to_pylist()
        assert len(set(questions)) == len(questions), split


def test_assert_disjoint_detects_overlap() -> None:
    table = generate("arithmetic", 5, seed=0, split="train")
    with pytest.raises(AssertionError, match="shared between splits"):
        assert_disjoint(table, table.slice(2, 1))


def test_split_rule_is_structural_and_about_one_in_five() -> None:
    keys = [f"k{i}" for i in range(5000)]
    held = sum(split_of(k) == "heldout" for k in keys)
    assert 800 < held < 1200
    assert [split_of(k) for k in keys[:50]] == [split_of(k) for k in keys[:50]]


def test_generate_all_follows_the_config() -> None:
    config = SyntheticConfig(
        train={"arithmetic": 10, "multihop": 8, "programming": 4},
        heldout={"arithmetic": 3, "programming": 2},
        seed=5,
        encyclopedia_size=60,
    )
    tables = generate_all(config)
    assert set(tables) == set(SPLITS)
    assert tables["train"].num_rows == 22 and tables["heldout"].num_rows == 5
    assert TASK.conform(tables["train"]).num_rows == 22
    ids = tables["train"].column("task_id").to_pylist()
    assert len(set(ids)) == len(ids)
    metas = [json.loads(m) for m in tables["train"].column("metadata").to_pylist()]
    assert {m["encyclopedia"]["n_entities"] for m in metas if m["synthetic_family"] == "multihop"} == {60}


def test_config_is_strict_and_frozen() -> None:
    with pytest.raises(ValidationError):
        SyntheticConfig(trian={"arithmetic": 1})  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        SyntheticConfig(train={"poetry": 3})  # type: ignore[dict-item]
    with pytest.raises(ValidationError):
        SyntheticConfig(encyclopedia_size=3)
    config = SyntheticConfig()
    with pytest.raises(ValidationError):
        config.seed = 4  # type: ignore[misc]


def test_errors_are_clear() -> None:
    with pytest.raises(SyntheticError, match="unknown synthetic family"):
        generate("poetry", 1)
    with pytest.raises(SyntheticError, match="unknown split"):
        generate("arithmetic", 1, split="test")
    with pytest.raises(SyntheticError, match="unique heldout problems"):
        generate("programming", 10_000, split="heldout")
    with pytest.raises(ValueError, match="not a synthetic"):
        parse_question("multihop", "What is the capital of France?")


def test_empty_request_gives_an_empty_task_table() -> None:
    table = generate("multihop", 0)
    assert table.num_rows == 0 and table.schema.equals(TASK.schema)
    assert isinstance(table, pa.Table)
