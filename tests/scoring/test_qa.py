"""QA normalisation, exact match and token F1 (coa.scoring.qa), including AFM's train/val modes.

Run: .venv/bin/python -m pytest tests/scoring/test_qa.py -q
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.scoring.qa import exact_match, normalize_answer, split_answers, token_f1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   cat,  AN apple; the end ", "cat apple end"),
        ("apple;the end", "applethe end"),  # deleting ";" joins the words first (SQuAD order)
        ("Theatre an Anthem", "theatre anthem"),  # articles only as whole words
        ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),
        ("“Röntgen”.", "röntgen"),  # unicode quotes are punctuation
        ("Ｒöntgen", "röntgen"),  # full-width R (NFKC)
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),  # casefold, not lower
        ("May 18, 2018", "may 18 2018"),
        ("Jay-Z", "jayz"),  # punctuation is deleted, not replaced by a space (SQuAD)
        ("¿Qué?", "qué"),
        ("東京、日本。", "東京日本"),
        ("", ""),
        ("The", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_composed_and_decomposed_forms_match() -> None:
    composed = unicodedata.normalize("NFC", "Röntgen")
    decomposed = unicodedata.normalize("NFD", "Röntgen")
    assert composed != decomposed
    assert exact_match(decomposed, [composed])
    assert not exact_match("Rontgen", ["Röntgen"])  # accents are kept


def test_exact_match_basic() -> None:
    golds = ["Wilhelm Conrad Röntgen", "Röntgen"]
    assert exact_match("wilhelm conrad röntgen.", golds)
    assert exact_match("The Röntgen", golds)
    assert not exact_match("Wilhelm Röntgen", golds)
    assert not exact_match("", golds)
    assert not exact_match("   ", golds)
    assert not exact_match("Röntgen", [])
    assert exact_match("Paris", "paris")  # a single gold may be a plain string


def test_multi_answer_modes_follow_afm_train_and_val() -> None:
    golds = ["Olivia", "MFSK"]
    assert exact_match("Olivia|MFSK", golds, mode="all")
    assert exact_match("Olivia | MFSK | ", golds, mode="all")  # empty parts dropped
    # One wrong part fails the train reward, but not the val metric if it comes second.
    assert not exact_match("Olivia|AM", golds, mode="all")
    assert exact_match("Olivia|AM", golds, mode="first")
    assert not exact_match("AM|Olivia", golds, mode="first")
    # The first *non-empty* part is the one checked.
    assert exact_match(" | MFSK", golds, mode="first")
    # "none" does not split; "|" is punctuation and disappears, so the words run together.
    assert not exact_match("Olivia|MFSK", golds, mode="none")
    assert exact_match("Olivia|", golds, mode="none")


def test_split_answers() -> None:
    assert split_answers("a|b |  | c") == ["a", "b ", " c"]
    assert split_answers("x|y", "first") == ["x"]
    assert split_answers("x|y", "none") == ["x|y"]
    assert split_answers("|||") == []
    with pytest.raises(ValueError, match="multi-answer mode"):
        split_answers("x", "any")  # type: ignore[arg-type]


def test_article_only_golds_still_matchable() -> None:
    assert exact_match("a", ["A"])
    assert exact_match("(A)", ["A"])
    assert not exact_match("the", ["A"])
    assert not exact_match("", ["A"])
    assert token_f1("A", ["A"]) == 1.0
    assert not exact_match("anything", ["...", "  "])  # golds with no content are ignored


def test_token_f1_values() -> None:
    assert token_f1("Wilhelm Röntgen", ["Wilhelm Conrad Röntgen"]) == pytest.approx(0.8)
    assert token_f1("Conrad", ["Wilhelm Conrad Röntgen", "Conrad"]) == 1.0  # max over golds
    assert token_f1("Paris France", ["Berlin"]) == 0.0
    assert token_f1("", ["x"]) == 0.0
    assert token_f1("the the", ["a"]) == 0.0
    # repeated tokens count with multiplicity
    assert token_f1("red red red", ["red"]) == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))


def test_token_f1_multi_part_modes() -> None:
    golds = ["New York City", "Boston"]
    assert token_f1("Boston|New York", golds, mode="all") == pytest.approx((1.0 + 0.8) / 2)
    assert token_f1("Boston|New York", golds, mode="first") == 1.0
    assert token_f1("New York|Boston", golds, mode="first") == pytest.approx(0.8)


def test_nq_fixture_golds_match_themselves(afm_fixtures: Path) -> None:
    rows = [json.loads(line) for line in (afm_fixtures / "nq_500.jsonl").read_text().splitlines()]
    assert len(rows) == 500
    for row in rows:
        golds = row["answer"]
        usable = [g for g in golds if normalize_answer(g) or g.strip(" .")]
        for gold in usable:
            assert exact_match(gold, golds), gold
            assert exact_match(f" {gold.upper()}. ", golds, mode="first"), gold
    first = rows[0]
    assert first["answer"] == ["Wilhelm Conrad Röntgen"]
    assert exact_match("wilhelm conrad RÖNTGEN", first["answer"])
    assert not exact_match("Marie Curie", first["answer"])


# ---------------------------------------------------------------------------------------------
# Properties

_text = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S", "Z"]), max_size=40)
_modes = st.sampled_from(["all", "first", "none"])


@settings(max_examples=400, deadline=None)
@given(_text)
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize_answer(text)
    assert normalize_answer(once) == once


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "an", "the", "The", "cat", "Röntgen", ",", ".", " ", "|", "-", "x"]),
        max_size=12,
    )
)
def test_normalize_idempotent_on_article_soup(tokens: list[str]) -> None:
    text = "".join(tokens)
    once = normalize_answer(text)
    assert normalize_answer(once) == once
    assert "  " not in once and once == once.strip()


@settings(max_examples=300, deadline=None)
@given(_text, st.lists(_text, min_size=1, max_size=3), _modes)
def test_em_implies_f1_is_one_and_f1_in_range(pred: str, golds: list[str], mode: str) -> None:
    f1 = token_f1(pred, golds, mode=mode)  # type: ignore[arg-type]
    assert 0.0 <= f1 <= 1.0
    if exact_match(pred, golds, mode=mode):  # type: ignore[arg-type]
        assert f1 == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(_text, min_size=1, max_size=3), st.data())
def test_a_gold_matches_itself_under_noise(golds: list[str], data: st.DataObject) -> None:
    gold = data.draw(st.sampled_from(golds))
    if "|" in gold or not split_answers(gold, "none"):
        return
    noisy = "  The " + gold.upper() + " !"
    assert exact_match(gold, golds, mode="all")
    assert token_f1(gold, golds) == 1.0
    if normalize_answer(gold) and normalize_answer(gold.upper()) == normalize_answer(gold):
        assert exact_match(noisy, golds)
